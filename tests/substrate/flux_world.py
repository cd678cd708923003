# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A small Flux for the emulated world: reconciles the real GitOps trees on StrictKubeEmulators.

``World`` holds the emulated clusters (by API URL) and the controllers that act on them;
``World.settle()`` runs reconcile passes until nothing changes. ``FluxController`` plays:

- the Flux Operator: a FluxInstance installs the Flux CRDs (the ``flux`` bundle of strict_api) and
  creates its sync source and root Kustomization (both named after the namespace), with the
  instance's ``kustomize.patches`` (JSON 6902) applied to them; a ResourceSet renders
  ``spec.resources`` once per entry of ``spec.inputs`` (``<< inputs.KEY >>``) and applies them.
- source-controller: an OCIRepository is pulled from the real registry (``registry_aliases`` maps
  in-cluster hosts such as krops-registry:5000 to the test's 127.0.0.1 port) with krops' own OCI
  client; a GitRepository is read with ``git archive`` from a local checkout (``git_checkouts`` maps
  URLs to folders). Sources on the internet (charts on ghcr.io, jetstack) cannot be reached here:
  they are marked Ready with a message that says they are stand-ins; with ``offline=True`` (the network
  cut, tests/substrate/airgap_world.py) they fail as an unresolvable host instead.
- kustomize-controller: a Kustomization waits for its dependsOn and its source, renders spec.path
  with the kubectl kustomize binary itself (not krops' render module; a folder without kustomization.yaml gets one listing
  its files, as Flux generates it), applies postBuild substitute/substituteFrom as kustomize-controller does (text envsubst on the
  YAML, then YAML 1.1 re-typing: flux_varsub.py), applies the result
  with server-side apply (field manager kustomize-controller, CRDs and Namespaces first, each stage
  all-or-nothing as Flux's dry-run makes it), into the cluster of spec.kubeConfig when set, prunes
  what left the inventory, and checks health (spec.wait: everything applied; else spec.healthChecks).
- helm-controller: a HelmRelease is Ready once its chart source is Ready; ``CHART_CRDS`` says which
  CRD bundles a chart installs, ``CHART_WORKLOADS`` which Deployment it runs (charts are not
  rendered): the Deployment is named after the release, with values.replicaCount replicas, and
  reports them available, as the controllers and kubelets of a real cluster would.

Reasons and messages are kustomize-controller v1.9.4's and source-controller v1.9.1's
(internal/controller/*.go), fluxcd/pkg ssa v0.76.1 (errors/errors.go, manager_wait.go). Time is
emulated: a health check that does not pass in a pass fails at once (HealthCheckFailed) and is
retried on the next pass, where a real controller would wait up to spec.timeout.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import http.client
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import traceback
import time
import urllib.parse


import yaml
from ansible_collections.krops.platform.plugins.module_utils import oci

from tests.substrate import flux_varsub, prewarm
from tests.substrate.kube_emulator import ApiError, _now, json_patch


def _innermost(frames):
    """The last three of ``frames`` (a traceback.StackSummary), innermost first."""
    return " < ".join("%s:%d %s" % (f.filename.rsplit("/", 1)[-1], f.lineno, f.name) for f in reversed(frames[-3:]))


def where(exc):
    """repr of a controller's exception with the innermost frames that raised it: a race shows where it ran."""
    return f"{exc!r} at {_innermost(traceback.extract_tb(exc.__traceback__))}"


KS = ("kustomize.toolkit.fluxcd.io", "kustomizations")
MANAGER = "kustomize-controller"
NAME_LABEL = "kustomize.toolkit.fluxcd.io/name"
NAMESPACE_LABEL = "kustomize.toolkit.fluxcd.io/namespace"
PRUNE_ANNOTATION = "kustomize.toolkit.fluxcd.io/prune"
FINALIZER = "finalizers.fluxcd.io"  # kustomize-controller v1.9.4 api/v1/kustomization_types.go
REQUEUE = "30s"  # kustomize-controller's default --requeue-dependency interval
POLL_SECONDS = 1.0  # how often a Ready source asks its registry or Git checkout again (emulated time)
RESYNC_TICKS = 5  # a running world's emulated spec.interval, in idle ticks (World.start)

# Which CRD bundles (strict_api.CRD_BUNDLES) a chart installs when its HelmRelease is installed.
CHART_CRDS = {
    "cert-manager": ("cert-manager",),
    "cluster-api-operator": ("capi-operator",),
    "flux-operator": ("flux-operator",),
}


# Charts whose workload the emulated install runs: chart -> (container name, image). podinfo's chart
# names its Deployment after the release (stefanprodan/podinfo charts/podinfo/templates/_helpers.tpl
# podinfo.fullname: the release name when it contains "podinfo").
CHART_WORKLOADS = {"podinfo": ("podinfo", "ghcr.io/stefanprodan/podinfo")}

# (group, kind) whose status no controller writes (kstatus reads them Current without conditions);
# filled by the cloud operators (cloud_operators.py), e.g. CAPZ's AzureClusterIdentity.
NO_STATUS_WRITER = set()


class Failure(Exception):
    """A reconcile step failed: (reason, message) for the Ready condition."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


# --- conditions --------------------------------------------------------------------------


def condition(obj, type_="Ready"):
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_ready(obj):
    cond = condition(obj)
    return bool(
        cond
        and cond.get("status") == "True"
        and (obj.get("status") or {}).get("observedGeneration", obj["metadata"].get("generation"))
        == obj["metadata"].get("generation")
    )


def set_status(api, obj, ready, reason, message, **fields):
    """Write Ready (and other status fields) only when something changes, so a world can settle."""
    res = api.resource_for(obj["apiVersion"], obj["kind"])
    key = api._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
    live = api.objects.get(key)
    if live is None:
        return False
    status = copy.deepcopy(live.get("status") or {})
    old = condition(live) or {}
    value = "True" if ready is True else ("Unknown" if ready is None else "False")
    generation = live["metadata"].get("generation", 1)
    wanted = {"type": "Ready", "status": value, "reason": reason, "message": message, "observedGeneration": generation}
    if (
        all(old.get(k) == v for k, v in wanted.items())
        and all(status.get(k) == v for k, v in fields.items())
        and status.get("observedGeneration") == generation
    ):
        return False
    wanted["lastTransitionTime"] = old.get("lastTransitionTime") if old.get("status") == value else _now()
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [wanted]
    status["observedGeneration"] = generation
    status.update(fields)
    # The check above reads the stored status, from which the server prunes what the kind's schema lacks (a
    # FluxInstance has no status.observedGeneration, a CAPI condition none of its own): such a status never
    # matches. The same write to the same object stores the same status, so it is not sent again (a server would
    # change nothing; the emulator would validate it all again on every pass of the loop).
    sent = (
        live["metadata"]["resourceVersion"],
        json.dumps(live.get("status"), sort_keys=True),
        json.dumps(status, sort_keys=True),
    )
    # object key -> (resourceVersion and status after set_status's last write, the status it sent), on the server
    last = api.__dict__.setdefault("status_sent", {})
    if last.get(key) == sent:
        return False
    api.patch(
        res, obj["metadata"].get("namespace"), obj["metadata"]["name"], "merge", {"status": status}, "status", MANAGER
    )
    stored = api.objects.get(key)
    if stored is not None:
        last[key] = (stored["metadata"]["resourceVersion"], json.dumps(stored.get("status"), sort_keys=True), sent[2])
    return True


def health(api, api_version, kind, name, namespace):
    """kstatus-like: Current, InProgress, Failed or NotFound."""
    try:
        res = api.resource_for(api_version, kind)
    except ApiError:
        return "NotFound"
    obj = api.objects.get(api._key(res, namespace, name))  # read only: no copy (CRDs are large)
    if obj is None:
        return "NotFound"
    status = obj.get("status") or {}
    if kind == "CustomResourceDefinition":
        est = condition(obj, "Established")
        return "Current" if est and est["status"] == "True" else "InProgress"
    if kind == "Namespace":
        return "InProgress" if obj["metadata"].get("deletionTimestamp") else "Current"
    if status.get("observedGeneration") is not None and status["observedGeneration"] < obj["metadata"].get(
        "generation", 1
    ):
        return "InProgress"
    ready = condition(obj)
    if (
        ready is None
        and not status
        and "status" in res.subresources
        and (res.group, res.plural) in api._served
        and (res.group, kind) not in NO_STATUS_WRITER
    ):
        return "InProgress"  # its controller has not reported yet
    if ready is not None:
        if ready["status"] == "True":
            return "Current"
        stalled = condition(obj, "Stalled")
        return "Failed" if stalled and stalled["status"] == "True" else "InProgress"
    return "Current"


def object_id(obj):
    group = obj["apiVersion"].rpartition("/")[0]
    return "{}_{}_{}_{}".format(obj["metadata"].get("namespace", ""), obj["metadata"]["name"], group, obj["kind"])


def fmt(obj):
    """fluxcd/pkg ssa utils.FmtUnstructured: Kind/namespace/name."""
    meta = obj.get("metadata") or {}
    return "/".join(
        [obj.get("kind", "")] + ([meta["namespace"]] if meta.get("namespace") else []) + [meta.get("name", "")]
    )


# --- the world ---------------------------------------------------------------------------


class World:
    """Emulated clusters (by URL) and the controllers reconciling them."""

    def __init__(self):
        self.clusters = {}
        self.controllers = []
        # Seconds a controller leaves a Ready object whose inputs have not changed (its emulated spec.interval);
        # None: every pass acts on every object. start() sets it to RESYNC_TICKS idle ticks: a real controller does not
        # act on every write to the cluster; settle() stays exhaustive.
        self.resync = None

    def add_cluster(self, api):
        self.clusters[api.url] = api
        return api

    def cluster_for_kubeconfig(self, text):
        try:
            config = yaml.safe_load(text) or {}
            contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
            context = contexts.get(config.get("current-context")) or next(iter(contexts.values()))
            clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
            server = clusters[context["cluster"]]["server"]
        except (yaml.YAMLError, KeyError, StopIteration, TypeError, AttributeError) as exc:
            raise Failure("ReconciliationFailed", f"failed to build kube client: invalid kubeconfig: {exc}")
        api = self.clusters.get(server.rstrip("/"))
        if api is None:
            raise Failure("ReconciliationFailed", f"failed to build kube client: dial {server}: connection refused")
        return api

    def start(self, interval=0.05, idle=1.0):
        """Reconcile continuously in a thread (for runs driven by ansible-playbook); ``stop()`` ends it.

        After a pass that changed nothing the next pass waits for a write to any cluster (checked every
        ``interval`` seconds, as a watch would wake a controller) or ``idle`` seconds (time-driven work:
        source polls), so an idle world costs little CPU."""
        self._stop = stop = threading.Event()  # this run's: a thread stop() gave up on ends when released
        self._step = None  # what the thread runs (stop() names it if the thread hangs)
        self.errors = []
        self.resync = RESYNC_TICKS * max(idle, interval)

        def versions():
            return {url: api._last_rv for url, api in list(self.clusters.items())}

        def loop():
            while not stop.is_set():
                before = versions()
                try:
                    for controller in self.controllers:
                        for api in list(self.clusters.values()):
                            self._step = "%s.reconcile(%s)" % (type(controller).__name__, getattr(api, "name", "?"))
                            controller.reconcile(api)
                except Exception as exc:
                    self.errors.append(where(exc))
                if before == versions():
                    deadline = time.monotonic() + max(idle, interval)
                    while not stop.wait(interval) and versions() == before and time.monotonic() < deadline:
                        pass

        self._thread = threading.Thread(target=loop, name="emulated-world", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=10.0):
        """End the thread; returns the reconcile errors. A thread still running after ``timeout`` seconds is one of
        them, naming the step it hangs in: left unseen, it would go on writing into the next test's clusters."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            frame = sys._current_frames().get(self._thread.ident)
            at = _innermost(traceback.extract_stack(frame)) if frame is not None else "?"
            self.errors.append(
                "the emulated world's thread did not stop within %gs: in %s at %s" % (timeout, self._step, at)
            )
        self.resync = None  # a settle() after the run is exhaustive again
        return self.errors

    def settle(self, max_rounds=40):
        """Reconcile until a whole pass changes nothing; returns the number of passes."""
        for round_ in range(1, max_rounds + 1):
            before = {url: api._last_rv for url, api in self.clusters.items()}
            for controller in self.controllers:
                for api in list(self.clusters.values()):
                    controller.reconcile(api)
            if before == {url: api._last_rv for url, api in self.clusters.items()} and set(before) == set(
                self.clusters
            ):
                return round_
        raise RuntimeError("the emulated world did not settle within %d passes" % max_rounds)


def _served(api, group, plural):
    return (group, plural) in api.resources


class FluxController:
    """Flux Operator, source-, kustomize- and helm-controller of the emulated world."""

    def __init__(self, world, workdir, registry_aliases=None, git_checkouts=None, renderer=None, offline=False):
        self.world = world
        # offline: the network is cut; a source outside registry_aliases fails as an unresolvable host
        self.offline = offline
        self.workdir = str(workdir)
        self.registry_aliases = dict(registry_aliases or {})
        self.git_checkouts = dict(git_checkouts or {})
        self.artifacts = {}  # (api url, kind, ns, name) -> (revision, folder)
        self._digests = {}  # artifact folder -> its content digest (the key of its builds in _BUILDS)
        self._polled = {}  # OCIRepository and GitRepository key -> when the source was last asked
        self._applied = {}  # (api url, Kustomization uid) -> (its inputs at the last apply, when)
        # the kustomize binary itself (never krops' render module), resolved now: stand-ins on PATH come later
        self.renderer = renderer or _find_kustomize()
        world.controllers.append(self)

    # ---- one pass -----------------------------------------------------------------------
    def reconcile(self, api):
        if _served(api, "fluxcd.controlplane.io", "fluxinstances"):
            for obj in api.list("fluxcd.controlplane.io/v1", "FluxInstance"):
                self._guard(api, obj, self.fluxinstance)
        if not _served(api, *KS):
            return
        for kind, plural, func in (
            ("OCIRepository", "ocirepositories", self.oci_repository),
            ("GitRepository", "gitrepositories", self.git_repository),
            ("HelmRepository", "helmrepositories", self.helm_repository),
        ):
            if _served(api, "source.toolkit.fluxcd.io", plural):
                for obj in api.list("source.toolkit.fluxcd.io/v1", kind):
                    self._guard(api, obj, func)
        if _served(api, "fluxcd.controlplane.io", "resourcesets"):
            for obj in api.list("fluxcd.controlplane.io/v1", "ResourceSet"):
                self._guard(api, obj, self.resourceset)
        for obj in api.list("kustomize.toolkit.fluxcd.io/v1", "Kustomization"):
            if self._finalizer(api, obj):
                self._guard(api, obj, self.kustomization)
        if _served(api, "helm.toolkit.fluxcd.io", "helmreleases"):
            for obj in api.list("helm.toolkit.fluxcd.io/v2", "HelmRelease"):
                self._guard(api, obj, self.helmrelease)

    def _finalizer(self, api, obj):
        """kustomize-controller's first steps: add finalizers.fluxcd.io; on deletion, garbage-collect the
        inventory when prune is set (deletionPolicy MirrorPrune) or deletionPolicy is Delete, then let go."""
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        finalizers = obj["metadata"].get("finalizers") or []
        if not obj["metadata"].get("deletionTimestamp"):
            if FINALIZER not in finalizers:
                api.patch(res, ns, name, "merge", {"metadata": {"finalizers": finalizers + [FINALIZER]}}, None, MANAGER)
            return True
        if FINALIZER not in finalizers:
            return False
        spec = obj.get("spec") or {}
        entries = ((obj.get("status") or {}).get("inventory") or {}).get("entries") or []
        policy = spec.get("deletionPolicy") or "MirrorPrune"
        if (
            not spec.get("suspend")
            and entries
            and (policy in ("Delete", "WaitForTermination") or (policy == "MirrorPrune" and spec.get("prune")))
        ):
            target = api
            try:
                if (spec.get("kubeConfig") or {}).get("secretRef"):
                    target = self._remote(api, ns, spec["kubeConfig"]["secretRef"])
            except Failure:
                target = None  # the remote cluster is gone: nothing left to delete there
            if target is not None:
                self._prune(target, entries, [])
        api.patch(
            res,
            ns,
            name,
            "merge",
            {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER] or None}},
            None,
            MANAGER,
        )
        return False

    def _guard(self, api, obj, func):
        if obj["metadata"].get("deletionTimestamp") or (obj.get("spec") or {}).get("suspend"):
            return
        try:
            func(api, obj)
        except Failure as exc:
            set_status(api, obj, False, exc.reason, exc.message)

    # ---- Flux Operator ------------------------------------------------------------------
    def fluxinstance(self, api, obj):
        ns = obj["metadata"]["namespace"]
        api.install_bundle("flux")
        sync = (obj.get("spec") or {}).get("sync")
        if sync:
            name = sync.get("name") or ns
            kind = sync.get("kind", "OCIRepository")
            ref = sync.get("ref", "")
            source = {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": ns},
                "spec": {"interval": sync.get("interval", "1m"), "url": sync["url"]},
            }
            # flux-operator v0.58.1 internal/builder/templates.go (syncTmpl): Git ref.name, OCI ref.tag
            if kind == "OCIRepository":
                source["spec"]["ref"] = {"tag": ref}
            elif kind == "GitRepository":
                source["spec"]["ref"] = {"name": ref}
            if sync.get("pullSecret"):
                source["spec"]["secretRef"] = {"name": sync["pullSecret"]}
            root = {
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "interval": "10m0s",
                    "path": sync.get("path", "."),
                    "prune": True,
                    "sourceRef": {"kind": kind, "name": name},
                },
            }
            for generated in (source, root):
                for patch in ((obj.get("spec") or {}).get("kustomize") or {}).get("patches") or []:
                    target = patch.get("target") or {}
                    if (
                        target.get("kind", generated["kind"]) == generated["kind"]
                        and target.get("name", name) == generated["metadata"]["name"]
                    ):
                        patched = json_patch(generated, yaml.safe_load(patch["patch"]))
                        generated.clear()
                        generated.update(patched)
                self._apply(api, generated, "flux-operator")
        set_status(
            api,
            obj,
            True,
            "ReconciliationSucceeded",
            "Reconciliation finished",
            lastAppliedRevision=(obj["spec"].get("distribution") or {}).get("version", ""),
        )

    def resourceset(self, api, obj):
        spec = obj.get("spec") or {}
        if spec.get("inputsFrom"):
            raise Failure("BuildFailed", "inputsFrom is not emulated; give spec.inputs")
        rendered = []
        for inputs in spec.get("inputs") or [{}]:
            for template in spec.get("resources") or []:
                rendered.append(_template(template, inputs))
        entries = []
        for item in rendered:
            item.setdefault("metadata", {}).setdefault("namespace", obj["metadata"]["namespace"])
            try:
                self._apply(api, item, "flux-operator")
            except ApiError as exc:
                raise Failure("BuildFailed", _dry_run_message(item, exc))
            entries.append({"id": object_id(item), "v": item["apiVersion"].rpartition("/")[2]})
        set_status(api, obj, True, "ReconciliationSucceeded", "Reconciliation finished", inventory={"entries": entries})

    # ---- sources ----------------------------------------------------------------------
    def _store_artifact(self, api, obj, revision, tar_bytes):
        key = (api.url, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        folder = os.path.join(
            self.workdir,
            "artifacts",
            re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(key[1:]) + "_" + revision.rpartition(":")[2][:16]),
        )
        if not os.path.isdir(folder):
            os.makedirs(folder)
            with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as tar:
                tar.extractall(folder, filter="data")
        self.artifacts[key] = (revision, folder)
        return {
            "revision": revision,
            "digest": revision.rpartition("@")[2],
            "path": folder,
            "url": "http://source-controller.emulated/{}".format("/".join(key[1:])),
            "lastUpdateTime": _now(),
        }

    def oci_repository(self, api, obj):
        spec = obj["spec"]
        parsed = urllib.parse.urlparse(spec["url"])
        host = self.registry_aliases.get(parsed.netloc)
        ref = spec.get("ref") or {}
        if host is None and self.offline:
            raise Failure(
                "OCIArtifactPullFailed",
                "failed to determine artifact digest: {}: dial tcp: lookup {}: no such host".format(
                    spec["url"], parsed.hostname
                ),
            )
        if host is None:
            set_status(
                api,
                obj,
                True,
                "Succeeded",
                "stand-in: {} is outside the emulated world".format(spec["url"]),
                artifact={
                    "revision": "{}@sha256:stand-in".format(ref.get("tag", "latest")),
                    "digest": "sha256:stand-in",
                    "path": "",
                    "url": spec["url"],
                    "lastUpdateTime": "1970-01-01T00:00:00Z",
                },
            )
            return
        key = (api.url, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if is_ready(obj) and time.monotonic() - self._polled.get(key, 0) < POLL_SECONDS:
            return  # source-controller polls every spec.interval; the emulated world polls every POLL_SECONDS
        self._polled[key] = time.monotonic()
        repository = parsed.path.lstrip("/")
        reference = ref.get("digest") or ref.get("tag") or "latest"
        stored = self.artifacts.get(key, (None,))[0]
        if (
            is_ready(obj)
            and stored
            and _manifest_digest(host, spec, repository, reference) == stored.rpartition("@")[2]
        ):
            return  # source-controller asks for the digest first and pulls only when it changed
        registry = oci.Registry(host, insecure=bool(spec.get("insecure")))
        try:
            manifest = registry.get_manifest(repository, reference)
            digest = registry.manifest_digest(repository, reference)
        except oci.OciError as exc:
            raise Failure("OCIArtifactPullFailed", f"failed to determine artifact digest: {exc}")
        if manifest is None:
            raise Failure(
                "OCIArtifactPullFailed",
                "failed to determine artifact digest: {}:{}: MANIFEST_UNKNOWN".format(spec["url"], reference),
            )
        wanted = (spec.get("layerSelector") or {}).get("mediaType") or oci.CONTENT_TYPE  # Flux's own, unless selected
        layers = [layer for layer in manifest.get("layers") or [] if layer.get("mediaType") == wanted]
        if not layers:
            raise Failure(
                "OCIArtifactPullFailed",
                "failed to pull artifact from '{}': no layer of type {}".format(spec["url"], wanted),
            )
        revision = "{}@{}".format(ref.get("tag", "latest"), digest) if not ref.get("digest") else digest
        key = (api.url, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if self.artifacts.get(key, (None,))[0] == revision and is_ready(obj):
            return
        artifact = self._store_artifact(api, obj, revision, registry.get_blob(repository, layers[0]["digest"]))
        set_status(api, obj, True, "Succeeded", f"stored artifact for digest '{revision}'", artifact=artifact)

    def git_repository(self, api, obj):
        spec = obj["spec"]
        checkout = self.git_checkouts.get(spec["url"])
        if checkout is None:
            raise Failure(
                "GitOperationFailed",
                "failed to checkout and determine revision: unable to clone '{}': "
                "not reachable from the emulated world".format(spec["url"]),
            )
        key = (api.url, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if (
            self.world.resync is not None
            and is_ready(obj)
            and key in self.artifacts
            and time.monotonic() - self._polled.get(key, 0) < POLL_SECONDS
        ):
            return  # a running world asks Git again every POLL_SECONDS, not on every pass; settle() asks every pass
        self._polled[key] = time.monotonic()
        ref = spec.get("ref") or {}
        rev = (
            ref.get("commit")
            or ref.get("name")
            or (("refs/tags/" + ref["tag"]) if ref.get("tag") else None)
            or "refs/heads/{}".format(ref.get("branch", "master"))
        )
        proc = subprocess.run(
            ["git", "-C", checkout, "rev-parse", "--verify", rev + "^{commit}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise Failure(
                "GitOperationFailed",
                "failed to checkout and determine revision: {}: {}".format(
                    rev, proc.stderr.strip() or "unknown revision"
                ),
            )
        commit = proc.stdout.strip()
        label = ref.get("branch") or ref.get("tag") or ref.get("name") or "HEAD"
        revision = f"{label}@sha1:{commit}"
        if self.artifacts.get(key, (None,))[0] != revision:
            tar_bytes = subprocess.run(
                ["git", "-C", checkout, "archive", "--format=tar", commit], capture_output=True, check=True
            ).stdout
            artifact = self._store_artifact(api, obj, revision, tar_bytes)
        else:
            artifact = (obj.get("status") or {}).get("artifact")
        set_status(api, obj, True, "Succeeded", f"stored artifact for revision '{revision}'", artifact=artifact)

    def helm_repository(self, api, obj):
        url = obj["spec"].get("url") or ""
        # an HTTP index is fetched by source-controller (IndexationFailed, source-controller
        # internal/controller/helmrepository_controller.go); an OCI one is only read when a chart is pulled
        if (
            self.offline
            and obj["spec"].get("type") != "oci"
            and urllib.parse.urlparse(url).netloc not in self.registry_aliases
        ):
            raise Failure(
                "IndexationFailed",
                f"failed to fetch Helm repository index: {url}: dial tcp: lookup {urllib.parse.urlparse(url).hostname}: no such host",
            )
        set_status(
            api, obj, True, "Succeeded", "stand-in: {} is outside the emulated world".format(obj["spec"].get("url"))
        )

    # ---- helm-controller --------------------------------------------------------------
    def helmrelease(self, api, obj):
        spec = obj["spec"]
        ns = obj["metadata"]["namespace"]
        chart_ref = spec.get("chartRef") or ((spec.get("chart") or {}).get("spec") or {}).get("sourceRef") or {}
        kind, name = chart_ref.get("kind"), chart_ref.get("name")
        plural = {
            "HelmRepository": "helmrepositories",
            "OCIRepository": "ocirepositories",
            "GitRepository": "gitrepositories",
        }.get(kind)
        source = None
        if plural and _served(api, "source.toolkit.fluxcd.io", plural):
            try:
                source = api.get("source.toolkit.fluxcd.io/v1", kind, name, chart_ref.get("namespace") or ns)
            except ApiError:
                source = None
        if source is None or not is_ready(source):
            raise Failure(
                "ArtifactFailed" if source is None else "SourceNotReady",
                "could not get Source object: {} '{}/{}' {}".format(
                    kind, chart_ref.get("namespace") or ns, name, "not found" if source is None else "is not ready"
                ),
            )
        chart = ((spec.get("chart") or {}).get("spec") or {}).get("chart") or name
        api.install_bundle(*CHART_CRDS.get(chart, ()))
        version = ((spec.get("chart") or {}).get("spec") or {}).get("version", "")
        if chart in CHART_WORKLOADS:
            self._run_workload(
                api,
                spec.get("targetNamespace") or ns,
                spec.get("releaseName") or obj["metadata"]["name"],
                CHART_WORKLOADS[chart],
                int((spec.get("values") or {}).get("replicaCount", 1)),
            )
        set_status(
            api,
            obj,
            True,
            "InstallSucceeded",
            "Helm install succeeded for release {}/{}.v1 with chart {}@{}".format(
                ns, spec.get("releaseName") or obj["metadata"]["name"], chart, version
            ),
        )

    @staticmethod
    def _run_workload(api, namespace, release, container, replicas):
        """The chart's Deployment, Available with all its replicas (the cluster's controllers and kubelets)."""
        labels = {"app.kubernetes.io/name": release}
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": release,
                "namespace": namespace,
                "labels": {"helm.sh/chart": container[0], "app.kubernetes.io/managed-by": "Helm"},
                # what helm writes on every object of a release (the teardown finds the ACK controllers by it)
                "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": container[0], "image": container[1]}]},
                },
            },
        }
        res = api.resource_for("apps/v1", "Deployment")
        live = api.objects.get(api._key(res, namespace, release))
        if live is None or (live.get("spec") or {}).get("replicas") != replicas:
            live = api.patch(res, namespace, release, "apply", deployment, None, "helm-controller", "Strict", True)
        generation = live["metadata"].get("generation", 1)
        status = {
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }
        if (live.get("status") or {}) != status:
            api.patch(res, namespace, release, "merge", {"status": status}, "status", "kube-controller-manager")

    # ---- kustomize-controller ---------------------------------------------------------
    @staticmethod
    def _apply(api, obj, manager=MANAGER):
        return ssa_apply(api, obj, manager)

    def kustomization(self, api, obj):
        spec = obj["spec"]
        ns = obj["metadata"]["namespace"]
        for dep in spec.get("dependsOn") or []:
            dep_ns = dep.get("namespace") or ns
            try:
                found = api.get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", dep["name"], dep_ns)
            except ApiError as exc:
                raise Failure(
                    "DependencyNotReady", "dependency '{}/{}' not found: {}".format(dep_ns, dep["name"], exc.message)
                )
            if not is_ready(found):
                raise Failure("DependencyNotReady", "dependency '{}/{}' is not ready".format(dep_ns, dep["name"]))
        ref = spec["sourceRef"]
        ref_text = "/".join([ref["kind"]] + ([ref["namespace"]] if ref.get("namespace") else []) + [ref["name"]])
        plural = {"OCIRepository": "ocirepositories", "GitRepository": "gitrepositories", "Bucket": "buckets"}.get(
            ref["kind"]
        )
        try:
            source = api.get("source.toolkit.fluxcd.io/v1", ref["kind"], ref["name"], ref.get("namespace") or ns)
        except ApiError:
            raise Failure("ArtifactFailed", f"Source '{ref_text}' not found")
        key = (api.url, ref["kind"], ref.get("namespace") or ns, ref["name"])
        if not is_ready(source) or key not in self.artifacts or plural is None:
            raise Failure("ArtifactFailed", f"Source is not ready, artifact not found, retrying in {REQUEUE}")
        revision, folder = self.artifacts[key]
        stamp, variables, target = self._inputs(api, obj, revision)
        if self._unchanged(api, obj, stamp, revision):
            return
        target_dir = os.path.normpath(os.path.join(folder, spec.get("path") or "."))
        if not (target_dir + os.sep).startswith(folder + os.sep) and target_dir != folder:
            raise Failure("ArtifactFailed", "path {} is outside the artifact".format(spec.get("path")))
        if not os.path.isdir(target_dir):
            raise Failure(
                "ArtifactFailed", f"kustomization path not found: stat {target_dir}: no such file or directory"
            )
        objects = copy.deepcopy(self._built(folder, target_dir))
        if spec.get("decryption"):  # spec.decryption: SOPS Secrets decrypted with the real sops (flux_sops.py)
            from tests.substrate.flux_sops import decrypt_objects

            objects = decrypt_objects(api, obj, objects, Failure)
        if stamp is None:  # the inputs could not be read: read them again, to fail in kustomize-controller's order
            variables = self._variables(api, obj)
            target = api
            if (spec.get("kubeConfig") or {}).get("secretRef"):
                target = self._remote(api, ns, spec["kubeConfig"]["secretRef"])
        final = []
        always = ((spec.get("postBuild") or {}).get("substituteStrategy") or "WithVariables") == "Always"
        for item in objects:
            if variables is not None:  # kustomize-controller substitutes on text, then re-types (flux_varsub)
                try:
                    item = flux_varsub.substitute(item, variables, always=always)
                except flux_varsub.SubstitutionError as exc:
                    raise Failure("BuildFailed", str(exc))
            if spec.get("targetNamespace") and item.get("kind") != "Namespace":
                item.setdefault("metadata", {})["namespace"] = spec["targetNamespace"]
            labels = item.setdefault("metadata", {}).setdefault("labels", {})
            labels.update({NAME_LABEL: obj["metadata"]["name"], NAMESPACE_LABEL: ns})
            final.append(item)
        entries = self._apply_staged(target, final)
        old = ((obj.get("status") or {}).get("inventory") or {}).get("entries") or []
        if spec.get("prune"):
            self._prune(target, old, entries)
        self._health(target, obj, final)
        set_status(
            api,
            obj,
            True,
            "ReconciliationSucceeded",
            f"Applied revision: {revision}",
            lastAppliedRevision=revision,
            lastAttemptedRevision=revision,
            inventory={"entries": entries},
        )
        if stamp is not None:
            self._applied[(api.url,) + stamp[:1]] = (stamp, time.monotonic())

    def _inputs(self, api, obj, revision):
        """What kustomize-controller reconciles anew on: the object itself (uid, generation, a reconcile request),
        the source revision, the substitution values and the target cluster. Returns (stamp, variables, target),
        the last two for the apply; (None, None, None) when they cannot be read (the full reconcile then reports
        why, in kustomize-controller's order)."""
        meta = obj["metadata"]
        try:
            variables = self._variables(api, obj)
            secret_ref = (obj["spec"].get("kubeConfig") or {}).get("secretRef")
            target = self._remote(api, meta["namespace"], secret_ref) if secret_ref else api
        except Failure:
            return None, None, None
        requested = (meta.get("annotations") or {}).get("reconcile.fluxcd.io/requestedAt")
        values = None if variables is None else tuple(sorted(variables.items()))
        return (meta["uid"], meta.get("generation"), requested, revision, values, target.url), variables, target

    def _unchanged(self, api, obj, stamp, revision):
        """A Ready Kustomization whose inputs are those of its last apply, within the world's resync window, is
        left alone: kustomize-controller applies on a change or at spec.interval, not on every cluster write."""
        if stamp is None or self.world.resync is None or not is_ready(obj):
            return False
        if (obj.get("status") or {}).get("lastAppliedRevision") != revision:
            return False
        last = self._applied.get((api.url, stamp[0]))
        return last is not None and last[0] == stamp and time.monotonic() - last[1] < self.world.resync

    def _built(self, artifact, target_dir):
        """The objects kustomize builds from target_dir, rendered once per artifact content in this process: a build
        reads the artifact's files alone, and an artifact folder never changes (one per revision), so the worlds of
        one test process that serve the same tree share its build (the rendered-tree cache of docs/testing.md)."""
        if artifact not in self._digests:
            self._digests[artifact] = _tree_digest(artifact)
        key = (tuple(self.renderer), self._digests[artifact], os.path.relpath(target_dir, artifact))
        with _BUILDS_LOCK:
            built = _BUILDS.get(key)
        if built is None:
            built = _shared_build(key, lambda: self._build(target_dir))
            with _BUILDS_LOCK:
                _BUILDS[key] = built
        return built

    def _build(self, folder):
        if any(
            os.path.isfile(os.path.join(folder, n))
            for n in ("kustomization.yaml", "kustomization.yml", "Kustomization")
        ):
            directory = folder
        else:  # Flux generates a kustomization.yaml listing the folder's manifests
            directory = os.path.join(self.workdir, "generated", re.sub(r"[^A-Za-z0-9]", "_", folder))
            shutil.rmtree(directory, ignore_errors=True)
            shutil.copytree(folder, directory)
            files = sorted(
                os.path.relpath(os.path.join(d, f), directory)
                for d, _s, fs in os.walk(directory)
                for f in fs
                if f.endswith((".yaml", ".yml"))
            )
            with open(os.path.join(directory, "kustomization.yaml"), "w", encoding="utf-8") as handle:
                yaml.safe_dump(
                    {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": files},
                    handle,
                )
        return _kustomize_build(self.renderer, directory)

    def _variables(self, api, obj):
        """postBuild variables as fluxcd/pkg kustomize LoadVariables and SubstituteVariables merge them."""
        post = obj["spec"].get("postBuild")
        if post is None:
            return None
        sources = []
        ns = obj["metadata"]["namespace"]
        for ref in post.get("substituteFrom") or []:
            try:
                found = api.get("v1", ref["kind"], ref["name"], ns)
            except ApiError as exc:
                if ref.get("optional") and exc.code == 404:
                    continue
                raise Failure(
                    "BuildFailed", "substitute from '{}/{}' error: {}".format(ref["kind"], ref["name"], exc.message)
                )
            data = found.get("data") or {}
            if ref["kind"] == "Secret":
                data = {k: base64.b64decode(v).decode("utf-8") for k, v in data.items()}
            sources.append(data)
        return flux_varsub.merge_variables(sources, post.get("substitute"))

    def _remote(self, api, ns, secret_ref):
        try:
            secret = api.get("v1", "Secret", secret_ref["name"], ns)
        except ApiError as exc:
            raise Failure("ReconciliationFailed", f"failed to build kube client: {exc.message}")
        data = secret.get("data") or {}
        key = secret_ref.get("key") or ("value" if "value" in data else "value.yaml")
        if key not in data:
            raise Failure(
                "ReconciliationFailed",
                "failed to build kube client: secret '{}/{}' has no key '{}'".format(ns, secret_ref["name"], key),
            )
        return self.world.cluster_for_kubeconfig(base64.b64decode(data[key]).decode("utf-8"))

    def _apply_staged(self, target, objects):
        first = [o for o in objects if o.get("kind") in ("CustomResourceDefinition", "Namespace", "ClusterRole")]
        rest = [o for o in objects if o not in first]
        entries = []
        for stage in (first, rest):
            with target._cond:
                point = target.savepoint()
                for item in stage:
                    try:
                        res = target.resource_for(item["apiVersion"], item["kind"])
                        key = target._key(res, item["metadata"].get("namespace") or "default", item["metadata"]["name"])
                        if (
                            key in target.objects
                            and key not in point["objects"]
                            and not target.reapplies(key, item, MANAGER, force=True)
                        ):
                            point["objects"][key] = copy.deepcopy(target.objects[key])
                        self._apply(target, item)
                    except ApiError as exc:  # the stage's dry-run fails: nothing of it is applied
                        target.rollback(point)
                        raise Failure("ReconciliationFailed", _dry_run_message(item, exc))
            entries += [{"id": object_id(o), "v": o["apiVersion"].rpartition("/")[2]} for o in stage]
        return entries

    def _prune(self, target, old, new):
        keep = {e["id"] for e in new}
        for entry in old:
            if entry["id"] in keep:
                continue
            ns, name, group, kind = entry["id"].split("_", 3)
            api_version = "{}/{}".format(group, entry["v"]) if group else entry["v"]
            try:
                live = target.get(api_version, kind, name, ns or None)
            except ApiError:
                continue
            if (live["metadata"].get("annotations") or {}).get(PRUNE_ANNOTATION) == "disabled":
                continue
            target.remove(api_version, kind, name, ns or None)

    def _health(self, target, obj, applied):
        spec = obj["spec"]
        if spec.get("wait"):
            checks = [
                (o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in applied
            ]
        else:
            checks = [
                (c.get("apiVersion", ""), c["kind"], c["name"], c.get("namespace"))
                for c in spec.get("healthChecks") or []
            ]
        failing = []
        for api_version, kind, name, namespace in checks:
            state = health(target, api_version, kind, name, namespace)
            if state != "Current":
                failing.append(
                    "{} status: '{}'".format("/".join([kind] + ([namespace] if namespace else []) + [name]), state)
                )
        if failing:
            raise Failure("HealthCheckFailed", "timeout waiting for: [{}]".format(", ".join(failing)))


_BUILDS = {}  # (renderer, artifact content digest, path in the artifact) -> the objects kustomize built
_BUILDS_LOCK = threading.Lock()


def _tree_digest(folder):
    """sha256 over every path, file content and link target under folder, in a fixed order."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(folder):
        subdirs.sort()
        for name in sorted(files + [d for d in subdirs if os.path.islink(os.path.join(directory, d))]):
            path = os.path.join(directory, name)
            digest.update(os.path.relpath(path, folder).encode() + b"\0")
            if os.path.islink(path):
                digest.update(b"link:" + os.readlink(path).encode() + b"\0")
            else:
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def _find_kustomize():
    for name, verb in (("kubectl", "kustomize"), ("kustomize", "build")):
        path = shutil.which(name)
        if path:
            return [path, verb]
    raise RuntimeError("the emulated Flux needs kubectl or kustomize on PATH")


def _shared_build(key, build):
    """A build kept in the run's shared cache folder (prewarm.CACHES_ENV, when the run has one) under its key, so the
    run's other test processes take it: written whole (os.replace), JSON as the objects are."""
    folder = os.environ.get(prewarm.CACHES_ENV)
    if not folder:
        return build()
    path = os.path.join(folder, "kustomize", hashlib.sha256(repr(key).encode()).hexdigest())
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        pass
    built = build()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
    with open(part, "w", encoding="utf-8") as handle:
        json.dump(built, handle)
    os.replace(part, path)
    return built


def _kustomize_build(renderer, directory):
    """kustomize-controller's build, played by the kubectl/kustomize binary; its output read as Flux reads
    resources (JSON values: go-yaml v2 typing of plain scalars, timestamps kept strings: flux_varsub)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(list(renderer) + [directory], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        text = proc.stderr.strip()
        logged = re.search(r'\berr="((?:[^"\\]|\\.)*)"', text)  # klog: ... "command failed" err="..."
        text = logged.group(1).replace('\\"', '"') if logged else re.sub(r"^error: ", "", text)
        text = text.replace(os.path.abspath(directory) + os.sep, "").replace(os.path.abspath(directory), ".")
        raise Failure("BuildFailed", "kustomize build failed: " + " ".join(text.split()))
    try:
        return [
            d for d in (flux_varsub.yaml_to_json_value(doc) for doc in _documents(proc.stdout)) if isinstance(d, dict)
        ]
    except flux_varsub.SubstitutionError as exc:
        raise Failure("BuildFailed", f"kustomize build failed: {exc}")


def _documents(text):
    return [doc for doc in re.split(r"^---\s*$", text, flags=re.M) if doc.strip()]


def _manifest_digest(host, spec, repository, reference):
    """The digest a plain-HTTP registry answers to HEAD on the manifest (None when it cannot tell): the cheap
    poll of a Ready source. krops' OCI client builds a TLS context per request, too costly once a second."""
    if not spec.get("insecure") or spec.get("secretRef"):
        return None
    connection = http.client.HTTPConnection(host, timeout=5)
    try:
        connection.request("HEAD", f"/v2/{repository}/manifests/{reference}", headers={"Accept": oci._ACCEPT})
        response = connection.getresponse()
        response.read()
        return response.getheader("Docker-Content-Digest") if response.status == 200 else None
    except OSError:
        return None
    finally:
        connection.close()


def ssa_apply(api, obj, manager=MANAGER):
    """Server-side apply with force, as Flux's ssa ResourceManager does (namespace defaulted like kubectl)."""
    res = api.resource_for(obj["apiVersion"], obj["kind"])
    ns = obj["metadata"].get("namespace") if res.namespaced else None
    if res.namespaced and not ns:
        ns = obj["metadata"]["namespace"] = "default"
    return api.patch(res, ns, obj["metadata"]["name"], "apply", obj, None, manager, "Strict", True)


def _dry_run_message(obj, exc):
    """fluxcd/pkg ssa errors: '<Kind>/<ns>/<name> dry-run failed (<Reason>): <message>'."""
    reason = "" if exc.message.startswith("no matches for kind") else f" ({exc.reason})"
    return f"{fmt(obj)} dry-run failed{reason}: {exc.message}"


_TEMPLATE = re.compile(r"<<-?\s*inputs\.([A-Za-z0-9_]+)\s*-?>>")


def _template(value, inputs):
    """ResourceSet templating for << inputs.KEY >> (the only form the trees use); anything else is an error."""
    if isinstance(value, dict):
        return {_template(k, inputs): _template(v, inputs) for k, v in value.items()}
    if isinstance(value, list):
        return [_template(v, inputs) for v in value]
    if isinstance(value, str) and "<<" in value:

        def one(match):
            if match.group(1) not in inputs:
                raise Failure("BuildFailed", f'failed to render template: map has no entry for key "{match.group(1)}"')
            return str(inputs[match.group(1)])

        rendered = _TEMPLATE.sub(one, value)
        if "<<" in rendered:
            raise Failure("BuildFailed", f"failed to render template {value!r}: only << inputs.KEY >> is emulated")
        return rendered
    return value
