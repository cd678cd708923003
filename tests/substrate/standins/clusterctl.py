# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `clusterctl` v1.13.5 stand-in: ``move`` really moves the Cluster API objects of a namespace between two
API servers over HTTP(S), with the kubeconfigs' CAs; ``version`` answers the pinned release.

Every argv goes through tool_contracts.check_clusterctl (unknown commands and flags fail as clusterctl
fails). ``move`` does what clusterctl move does, in its order: discovers the namespaced kinds of the
*.cluster.x-k8s.io groups (not operator, clusterctl or runtime) and the Secrets of the Clusters
(<cluster>-*), pauses the source Clusters, creates every object on the target (the Clusters paused,
status copied), removes the finalizers on the source and deletes the objects there, then unpauses
the Clusters on the target. ``--dry-run`` prints the object list and changes nothing.

Modes for tests (``<bin>/clusterctl.json``: {"mode": ..., "resume": bool}): ``move`` (default),
``fail-half`` (exits 1 after creating half of the objects), ``fail-delete`` (exits 1 halfway through
deleting on the source), ``noop`` (exits 0 having moved nothing); ``resume: false`` leaves the
Clusters paused on the target. ``kill`` (``before``, ``paused``, ``half`` or ``delete``) SIGKILLs
the whole ansible-playbook run (common.kill_the_run) before clusterctl changes anything, after it paused
the source's Clusters, after half of the objects are created on the target, or halfway through deleting
on the source: the host dying during the move.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Cluster, bin_dir, exit_with, kill_the_run, record  # noqa: E402

from tests.substrate import tool_contracts as contracts  # noqa: E402

MERGE = "application/merge-patch+json"


def settings():
    path = os.path.join(bin_dir(), "clusterctl.json")
    loaded = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
    return loaded.get("mode", "move"), loaded.get("resume", True), loaded.get("kill")


def _fail(message):
    exit_with("Error: " + message)


def move(flags):
    mode, resume, kill = settings()
    src = Cluster(flags.get("--kubeconfig"), flags.get("--kubeconfig-context"), fail=_fail)
    if not flags.get("--to-kubeconfig"):
        _fail("please specify a target cluster using the --to-kubeconfig flag")
    dst = Cluster(flags.get("--to-kubeconfig"), flags.get("--to-kubeconfig-context"), fail=_fail)
    ns = flags.get("-n") or flags.get("--namespace") or "default"
    kinds, seen = [], set()
    for group in src.call("GET", "/apis")[1]["groups"]:
        name = group["name"]
        if not name.endswith("cluster.x-k8s.io") or name.split(".")[0] in ("operator", "clusterctl", "runtime"):
            continue
        # each kind once, in the group's preferred version when it is served there (clusterctl reads
        # and writes the CRDs' storage version); the emulator serves different kinds per version
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        versions = sorted(group["versions"], key=lambda v: v["groupVersion"] != preferred)
        for version in versions:
            gv = version["groupVersion"]
            for res in src.call("GET", "/apis/" + gv)[1]["resources"]:
                if "/" not in res["name"] and res["namespaced"] and (name, res["kind"]) not in seen:
                    seen.add((name, res["kind"]))
                    kinds.append((gv, res["name"], res["kind"]))
    objects = []
    for gv, plural, _kind in kinds:
        for obj in src.call("GET", "/apis/%s/namespaces/%s/%s" % (gv, ns, plural))[1]["items"]:
            objects.append(("/apis/%s/namespaces/%s/%s" % (gv, ns, plural), obj))
    clusters = [o["metadata"]["name"] for _p, o in objects if o["kind"] == "Cluster"]
    for obj in src.call("GET", "/api/v1/namespaces/%s/secrets" % ns)[1]["items"]:
        if any(obj["metadata"]["name"].startswith(c + "-") for c in clusters):
            objects.append(("/api/v1/namespaces/%s/secrets" % ns, obj))
    objects.sort(key=lambda po: po[1]["kind"] != "Cluster")
    if flags.get("--dry-run"):
        for _path, obj in objects:
            print("%s/%s" % (obj["kind"], obj["metadata"]["name"]))
        return
    if mode == "noop":
        print("Performing move...")
        return
    if kill == "before":
        kill_the_run()
    for path, obj in objects:
        if obj["kind"] == "Cluster":
            src.call("PATCH", path + "/" + obj["metadata"]["name"], {"spec": {"paused": True}})
    half = max(1, len(objects) // 2)
    if kill == "paused":
        kill_the_run()
    for index, (path, obj) in enumerate(objects):
        if kill == "half" and index == half:
            kill_the_run()
        if mode == "fail-half" and index == half:
            _fail("action failed after 10 attempts: failed to connect to the management cluster")
        body = {k: v for k, v in obj.items() if k != "status"}
        body["metadata"] = {
            k: v
            for k, v in obj["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp")
        }
        if obj["kind"] == "Cluster":
            body["spec"] = dict(body.get("spec") or {}, paused=True)
        status, _answer = dst.call("POST", path, body, ok=(200, 201, 409))
        if status == 409:
            dst.call("PATCH", path + "/" + obj["metadata"]["name"], body)
        if obj.get("status") and obj["kind"] != "Secret":
            dst.call("PATCH", path + "/" + obj["metadata"]["name"] + "/status", {"status": obj["status"]})
    for index, (path, obj) in enumerate(reversed(objects)):
        if kill == "delete" and index == half:
            kill_the_run()
        if mode == "fail-delete" and index == half:
            _fail("failed to delete objects from the source cluster")
        src.call("PATCH", path + "/" + obj["metadata"]["name"], {"metadata": {"finalizers": None}})
        src.call("DELETE", path + "/" + obj["metadata"]["name"], ok=(200, 202, 404))
    if resume:
        for path, obj in objects:
            if obj["kind"] == "Cluster":
                dst.call("PATCH", path + "/" + obj["metadata"]["name"], {"spec": {"paused": None}})
    print("Performing move...\nMoving Cluster API objects Clusters=%d" % len(clusters))


def main(argv):
    record("clusterctl", argv)
    try:
        command, _positional, flags = contracts.check_clusterctl(argv)
    except contracts.Refused as exc:
        exit_with(str(exc), exc.rc)
    if command == ("version",):
        if (flags.get("-o") or flags.get("--output")) == "short":
            print("v%s" % contracts.CLUSTERCTL_VERSION)
        else:
            major, minor, patch = contracts.CLUSTERCTL_VERSION.split(".")
            print(
                'clusterctl version: &version.Info{Major:"%s", Minor:"%s", GitVersion:"v%s", GitCommit:"", '
                'GitTreeState:"clean", BuildDate:"", GoVersion:"go1.24", Compiler:"gc", Platform:"linux/amd64"}'
                % (major, minor, contracts.CLUSTERCTL_VERSION)
            )
        return
    if command == ("move",):
        try:
            move(flags)
        except urllib.error.URLError as exc:
            _fail(f"failed to connect to the management cluster: {exc}")
        return
    exit_with("Error: clusterctl stand-in: {} is not emulated".format(" ".join(command)), 2)


if __name__ == "__main__":
    main(sys.argv[1:])
