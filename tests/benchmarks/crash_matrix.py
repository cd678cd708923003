# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Crash matrix (issue 30): the local-host (or, with --env aws, the aws) playbook interrupted at every step, on the emulated host.

    .venv/bin/python tests/benchmarks/crash_matrix.py --list            # the points of a baseline run
    .venv/bin/python tests/benchmarks/crash_matrix.py --limit 12        # 12 points spread over the list
    .venv/bin/python tests/benchmarks/crash_matrix.py --only clusterctl:before task:120
    .venv/bin/python tests/benchmarks/crash_matrix.py --env aws --only aws:ec2.DeleteVpc   # the aws lifecycle
    .venv/bin/python tests/benchmarks/crash_matrix.py --limit 40 --shard 2/4  # the 2nd of 4 CI jobs' points
    make crash-matrix [CRASH_ARGS='--limit 12']

One uninterrupted baseline run (tests/substrate/lifecycle.py, with the decoys of
tests/integration/test_e2e_local_host.py) gives the points, from the run itself:
- ``task:<n>``: the n-th task boundary (the krops_crash callback logs every task start; at the point it
  SIGKILLs the whole ansible-playbook process group when task n starts, i.e. after task n-1 ended);
- ``clusterctl:<before|paused|half|delete>``: SIGKILL from inside ``clusterctl move`` (the stand-in, before
  it changes anything, after pausing the source, after half the objects are created on the target, halfway
  through deleting on the source);
- ``write:<api>:<METHOD> <path>``: the first time the run sends that mutating request to that API server,
  it answers 500 once (every distinct Kubernetes write the baseline sent);
- ``reset:<api>:<METHOD> <path>``: the same write, the connection closed with no answer once;
- ``stall:<api>:<METHOD> <path>``: the same write, no answer for 35 s (past krops' 30 s request timeout) once;
- ``aws:<service.Operation>`` / ``aws-reset:<service.Operation>`` (``--env aws``): an AWS delete the baseline's
  teardown sent (through tests/benchmarks/aws_latency_proxy.py), answered 500 once or its connection closed
  once; checked like a teardown point (below), with what CAPA and ACK created in moto as owned and the moto
  decoys of tests/integration/test_e2e_aws.py as decoys;
- ``teardown:<n>``: after an uninterrupted run, ``--tags teardown`` SIGKILLed when its n-th task starts; only
  check (b) applies: a second teardown must exit 0 with nothing owned left and every decoy kept.

At each point, on a fresh host with the same decoys and the fault armed:
- (a) ``converged``: a plain re-run exits 0, ends with the baseline's objects (apiVersion, kind, namespace,
  name on every API server, and the containers), and the run after it has changed=0;
- (b) ``torn down clean``: instead of the re-run (a second fresh host, same fault), ``--tags teardown``
  exits 0, and nothing krops owns is left (containers, volumes, kind clusters, API servers, krops'
  kubeconfig files) while every decoy is kept; a teardown that exits 0 with something owned left is a bug;
- (c) ``lost``: the user's kubeconfig (~/.kube/config, written before the first run) must keep its
  context, and after the re-run the management cluster must hold the Flux sync state.

Prints ``crash matrix: N points, C converged, T torn down clean, L lost`` and one row per point; exits 1
when a point fails. Each point costs two faulted runs, a re-run, a changed=0 run and a teardown (about
8 minutes on 2 cores): this is not part of the test suite (docs/testing.md); its fast form is
(tests/integration/test_crash_matrix.py, which shares this file's faults, diff, table and summary line).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / ".collections")]

from tests.integration.test_e2e_local_host import DECOY_CONTAINERS, _decoys  # noqa: E402
from tests.substrate.lifecycle import EmulatedWorld, changed_tasks, failed_tasks, install_clusterctl  # noqa: E402
from tests.substrate import product_differential  # noqa: E402

# --env: the playbook, its inventory and the management Cluster's name (bootstrap.toml)
ENVS = {
    "local-host": ("playbooks/local-host.yml", "inventories/local-host", "local-management"),
    "aws": ("playbooks/aws.yml", "inventories/aws", "eu-north-1-management"),
}
PLAYBOOK, INVENTORY, MGMT = ENVS["local-host"]
SITE = None  # the aws site (AwsSite) when --env aws
CALLBACKS = Path(__file__).resolve().parent / "crash_callback"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
CLUSTERCTL_KILLS = ("before", "paused", "half", "delete")
KROPS_FILES = (".kube/krops-mgmt.yaml", ".kube/krops-local-workload.yaml")
USER_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "prod", "cluster": {"server": "https://prod.example:6443"}}],
    "users": [{"name": "prod", "user": {"token": "user-token"}}],
    "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "prod"}}],
    "current-context": "prod",
}


# How a write fails once, by the point's kind: a 500 answer; the connection closed with no answer; no answer for
# longer than krops' request timeout (config.TIMEOUTS["request"], 30 s), then the write is applied.
WRITE_FAULTS = {
    "write": lambda api, verb, pattern: api.inject_failure(verb, pattern, 500, "injected by the crash matrix", times=1),
    "reset": lambda api, verb, pattern: api.inject_reset(verb, pattern, times=1),
    "stall": lambda api, verb, pattern: api.inject_stall(verb, pattern, seconds=35.0, times=1),
}


def parse_write_point(point):
    """``<kind>:<api>:<METHOD> <path>`` -> (kind, api name, method, anchored path regex)."""
    kind, api_name, request = point.split(":", 2)
    method, path = request.split(" ", 1)
    return kind, api_name, method, "^%s$" % re.escape(path)


def arm(api, point):
    """Make the write of ``point`` fail once on ``api`` (WRITE_FAULTS by the point's kind)."""
    kind, _name, method, pattern = parse_write_point(point)
    WRITE_FAULTS[kind](api, method, pattern)


def distinct_writes(apis, seen=None):
    """``write:<api>:<METHOD> <path>`` of every distinct mutating request the API servers logged (no dry runs)."""
    seen = [] if seen is None else seen
    for api in apis:
        for method, path in list(api.requests):
            if method in WRITES and "dryRun" not in path:
                item = "write:%s:%s %s" % (api.name, method, path.split("?", 1)[0])
                if item not in seen:
                    seen.append(item)
    return seen


def summary(rows):
    """The matrix line: points, converged, torn down clean, lost."""
    converged = sum(1 for r in rows if r["converged"])
    clean = sum(1 for r in rows if r["torn_down"])
    lost = sum(1 for r in rows if r["lost"])
    return "crash matrix: %d points, %d converged, %d torn down clean, %d lost" % (len(rows), converged, clean, lost)


class AwsSite:
    """What the aws lifecycle needs around the host (as tests/integration/test_e2e_aws.py runs it): moto behind
    the latency proxy (no latency, no holds; its fault hooks fail krops' AWS calls), the GitOps checkout and the
    GitHub double; per host a clean moto account with the decoys, and CAPA and ACK over moto."""

    def __init__(self, root):
        from tests.benchmarks.aws_latency_proxy import HOLDS, LatencyProxy
        from tests.integration.test_e2e_aws import ACCOUNT
        from tests.integration.test_e2e_azure import GitHubDouble
        from tests.substrate import aws_world
        from tests.substrate.fixtures import VENV_BIN, ManagedProcess, free_port, wait_until_answers
        from tests.substrate.gitops import gitops_checkout

        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "eu-north-1",
        }.items():
            os.environ[key] = value
        os.environ.pop("AWS_PROFILE", None)
        port = free_port()
        self.moto_server = ManagedProcess(
            [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], Path(root) / "moto.log"
        )
        self.moto = "http://127.0.0.1:%d" % port
        wait_until_answers(self.moto + "/moto-api/", process=self.moto_server.process)
        # krops' calls go through the proxy (its fault hooks); CAPA and ACK reach moto directly
        self.proxy = LatencyProxy(self.moto, latency=0.0, holds={k: 0.0 for k in HOLDS})
        aws_world.register_ack_charts(_Patch())
        self.repo, head = gitops_checkout(
            Path(root), ("mgmt/aws/aws-account.yaml", 'AWS_ACCOUNT_ID: "000000000000"', f'AWS_ACCOUNT_ID: "{ACCOUNT}"')
        )
        self.github = GitHubDouble("krops/krops", "main", head, "ghp_test")
        self.extra = json.dumps({"preflight_github_api_url": self.github.url, "preflight_check_aws_quota": False})

    def host_options(self):
        return {
            "environment": "aws",
            "git_checkouts": {"https://github.com/krops/krops": str(self.repo)},
            "env": {"GITHUB_TOKEN": "ghp_test", "AWS_ENDPOINT_URL": self.proxy.url},
        }

    def prepare(self, host):
        """A clean account with the decoys; CAPA and ACK in the host's world; the age key of the aws tree."""
        import urllib.request

        from tests.integration.test_e2e_aws import seed_decoys
        from tests.substrate.aws_world import Ack, AckController, Capa

        request = urllib.request.Request(self.moto + "/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()
        with self.proxy._lock:
            self.proxy.faults, self.proxy.by_operation = [], {}
        host.aws_decoys = seed_decoys(self.moto, None)
        host.capa, host.ack = Capa(self.moto), Ack(self.moto)
        host.world.capi.plug_in("AWSManagedCluster", host.capa)
        AckController(host.world.world, host.ack, needs_deployment=True, resync=0.2)
        key = host.world.home / ".config" / "krops" / "age.agekey"
        key.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "tests" / "integration" / "fixtures" / "aws-sops-test.agekey", key)
        key.chmod(0o600)

    def deletes(self):
        """``aws:<service.Operation>`` of every AWS delete krops sent (through the proxy) in this host's runs."""
        verbs = ("Delete", "Terminate", "Release", "Detach", "Disassociate", "Deregister", "Revoke", "Remove")
        return ["aws:" + op for op in sorted(self.proxy.by_operation) if op.split(".", 1)[1].startswith(verbs)]

    def owned_left(self, host):
        from tests.substrate.aws_world import inventory

        after = inventory(self.moto)
        created = host.capa.created() | host.ack.created()
        problems = ["AWS %s %s %s" % item for item in sorted(created & after)]
        problems += ["decoy AWS %s %s %s deleted" % item for item in sorted(host.aws_decoys - after)]
        return problems

    def inventory_counts(self, host):
        from tests.substrate.aws_world import inventory

        counts = {}
        for region, rtype, _id in inventory(self.moto) - host.aws_decoys:
            counts[(region, rtype)] = counts.get((region, rtype), 0) + 1
        return ["%s %s x%d" % (r, t, n) for (r, t), n in sorted(counts.items())]

    def stop(self):
        self.proxy.stop()
        self.github.stop()
        self.moto_server.stop()


class _Patch:
    """pytest's monkeypatch.setitem for a script run (the process ends with the matrix)."""

    @staticmethod
    def setitem(mapping, key, value):
        mapping[key] = value


# AWS faults by the point's kind: the call answers 500 once (botocore retries a 500), or is reset once.
AWS_FAULTS = {"aws": "inject_failure", "aws-reset": "inject_reset"}


class Host:
    """A fresh emulated host with the decoys and the user's kubeconfig, and a fault to arm."""

    def __init__(self, root, point=None):
        self.world = EmulatedWorld(root, **(SITE.host_options() if SITE else {})).start()
        if SITE:
            SITE.prepare(self)
        self.decoy_volumes = _decoys(self.world)
        kube = self.world.home / ".kube"
        kube.mkdir(parents=True, exist_ok=True)
        (kube / "config").write_text(json.dumps(USER_KUBECONFIG))
        self.user_kubeconfig = _digest(kube / "config")
        self.log = Path(root) / "tasks.jsonl"
        self.point = point
        self._armed = []
        if point and point.split(":", 1)[0] in WRITE_FAULTS:
            self._armed.append(parse_write_point(point))
            original = self.world._new_api

            def new_api(name):
                api = original(name)
                for armed in list(self._armed):
                    if armed[1] == name:
                        WRITE_FAULTS[armed[0]](api, armed[2], armed[3])
                        self._armed.remove(armed)
                return api

            self.world._new_api = new_api
        if point and point.startswith("clusterctl:"):
            install_clusterctl(self.world.bin, kill=point.split(":", 1)[1])

    def run(self, *args, fault=False):
        env = {
            "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
            "ANSIBLE_CALLBACKS_ENABLED": "krops_crash",
            "KROPS_CRASH_LOG": str(self.log),
        }
        if fault and self.point and self.point.split(":", 1)[0] in ("task", "teardown"):
            env["KROPS_CRASH_AT"] = self.point.split(":", 1)[1]
        if SITE:
            # moto deletes at once: the sweep polls from the start (docs/aws-orphan-sweep.md)
            env["KROPS_AWS_SWEEP_TIME_SCALE"] = "0"
            args = ("-e", SITE.extra) + tuple(args)
        started = time.monotonic()
        rc, out, err = self.world.playbook(PLAYBOOK, *args, inventory=INVENTORY, env=env)
        if fault and self.point and self.point.startswith("clusterctl:"):
            install_clusterctl(self.world.bin)  # the host is back
        return rc, out, err, time.monotonic() - started

    def snapshot(self):
        """Every object's identity on every API server, by server name, and the containers."""
        state = {}
        for api in list(self.world.world.clusters.values()):
            with api._cond:
                keys = sorted("%s/%s %s/%s" % (g, p, ns or "", n) for (g, p, ns, n) in api.objects)
            state[api.name] = keys
        state["containers"] = sorted(self.world.docker.containers)
        if SITE:
            state["aws"] = SITE.inventory_counts(self)
        return state

    def writes(self):
        return distinct_writes(self.world._apis)

    def tasks(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def owned_left(self):
        left = self.world.leftovers()
        problems = []
        decoys = set(DECOY_CONTAINERS) | {"other-control-plane"}
        problems += ["container " + c for c in left["containers"] if c not in decoys]
        missing = decoys - set(left["containers"])
        problems += ["decoy container %s deleted" % c for c in sorted(missing)]
        problems += ["volume " + v for v in left["volumes"] if v not in self.decoy_volumes]
        problems += ["decoy volume %s deleted" % v for v in sorted(self.decoy_volumes - set(left["volumes"]))]
        problems += ["kind cluster " + k for k in left["kind_clusters"] if k != "other"]
        # aws: the management cluster's emulated API server stands for an EKS cluster, whose deletion the moto
        # inventory shows (SITE.owned_left); nothing in the emulated world stops it
        kept = {"kind-other"} | ({MGMT} if SITE else set())
        problems += ["API server " + a for a in left["api_servers"] if a not in kept]
        if left["registry_answers"]:
            problems.append("the registry still answers")
        problems += ["file ~/" + f for f in KROPS_FILES if (self.world.home / f).exists()]
        if SITE:
            problems += SITE.owned_left(self)
        return problems

    def lost(self, after_rerun):
        problems = []
        if _digest(self.world.home / ".kube" / "config") != self.user_kubeconfig:
            config = (
                (self.world.home / ".kube" / "config").read_text()
                if (self.world.home / ".kube" / "config").exists()
                else ""
            )
            if '"prod"' not in config and "prod" not in config:
                problems.append("the user's kubeconfig lost its context prod")
        if after_rerun:
            try:
                mgmt = self.world.cluster(MGMT)
                for kind, name in (("ConfigMap", "krops-run"),):
                    if not mgmt.exists("v1", kind, name, "flux-system"):
                        problems.append("%s flux-system/%s missing on the management cluster" % (kind, name))
            except KeyError:
                problems.append("no management cluster")
        return problems

    def stop(self):
        return self.world.stop()


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def baseline(root):
    """The uninterrupted run's end state, task boundaries, writes and seconds, then the task boundaries of the
    teardown from that state (an uninterrupted teardown too, which must exit 0)."""
    host = Host(root / "baseline")
    try:
        rc, out, err, seconds = host.run()
        if rc != 0:
            raise SystemExit("baseline run failed: %s\n%s" % (failed_tasks(out), err[-2000:]))
        tasks, snapshot, writes = host.tasks(), host.snapshot(), host.writes()
        host.log = host.log.with_name("teardown-tasks.jsonl")
        rc, out, err, _s = host.run("--tags", "teardown")
        if rc != 0:
            raise SystemExit("baseline teardown failed: %s\n%s" % (failed_tasks(out), err[-2000:]))
        left = host.owned_left()
        if left:
            raise SystemExit("the baseline teardown left: %s" % ", ".join(left[:10]))
        # the AWS deletes are the teardown's (the sweep, CAPA's deletions are CAPA's own calls to moto)
        return snapshot, tasks, writes + (SITE.deletes() if SITE else []), seconds, host.tasks()
    finally:
        host.stop()


def enumerate_points(tasks, writes, teardown_tasks=()):
    points = ["task:%d" % t["n"] for t in tasks]
    points += ["teardown:%d" % t["n"] for t in teardown_tasks]
    points += ["clusterctl:" + k for k in CLUSTERCTL_KILLS]
    kube = [w for w in writes if w.startswith("write:")]
    points += kube
    points += ["%s:%s" % (kind, w.split(":", 1)[1]) for kind in ("reset", "stall") for w in kube]
    aws = [w for w in writes if w.startswith("aws:")]
    points += aws + ["aws-reset:" + w.split(":", 1)[1] for w in aws]
    return points


def spread(points, limit):
    """``limit`` points spread over the list, the clusterctl kills always among them."""
    if not limit or limit >= len(points):
        return points
    chosen = [p for p in points if p.startswith("clusterctl:")][:limit]
    rest = [p for p in points if p not in chosen]
    step = len(rest) / float(max(limit - len(chosen), 1))
    chosen += [rest[int(i * step)] for i in range(limit - len(chosen))]
    return [p for p in points if p in chosen]


def check_point(root, point, expected, checks):
    row = {"point": point, "fault_rc": None, "converged": None, "torn_down": None, "lost": [], "notes": []}
    if point.split(":", 1)[0] in ("teardown",) + tuple(AWS_FAULTS):
        return check_teardown_point(root, point, row)
    if "rerun" in checks:
        host = Host(root / "rerun", point)
        try:
            rc, out, err, _s = host.run(fault=True)
            row["fault_rc"] = rc
            rc, out, err, _s = host.run()
            if rc != 0:
                row["converged"] = False
                row["notes"].append("re-run rc=%d: %s" % (rc, _short(failed_tasks(out), err)))
            else:
                differs = diff(expected, host.snapshot())
                rc2, out2, err2, _s = host.run()
                changed = changed_tasks(out2) if rc2 == 0 else ["rc=%d: %s" % (rc2, _short(failed_tasks(out2), err2))]
                row["converged"] = not differs and not changed
                if differs:
                    row["notes"].append("end state differs: " + "; ".join(differs[:4]))
                if changed:
                    row["notes"].append("run after: changed " + ", ".join(changed[:4]))
            row["lost"] += host.lost(after_rerun=row["converged"])
        finally:
            errors = host.stop()
            if errors:
                row["notes"].append("world errors: %s" % errors[:2])
    if "teardown" in checks:
        host = Host(root / "teardown", point)
        try:
            rc, out, err, _s = host.run(fault=True)
            row["fault_rc"] = rc if row["fault_rc"] is None else row["fault_rc"]
            tear_down(host, row)
        finally:
            host.stop()
    return row


def tear_down(host, row):
    """``--tags teardown`` on the host: torn down clean when it exits 0 with nothing owned left.

    aws: once neither kind nor the management cluster answers, a teardown refuses the cloud side unless forced
    (docs/teardown.md, ``teardown_force``); that refusal is followed by the forced teardown a user would run."""
    rc, out, err, _s = host.run("--tags", "teardown")
    if rc != 0 and SITE and "no controller host answers" in json.dumps(failed_tasks(out)):
        row["notes"].append("no controller host answers: teardown_force=true")
        rc, out, err, _s = host.run("--tags", "teardown", "-e", "teardown_force=true")
    left = host.owned_left()
    row["torn_down"] = rc == 0 and not left
    if rc == 0 and left:
        row["notes"].append("BUG teardown rc=0 but left: " + ", ".join(left[:5]))
    elif rc != 0:
        row["notes"].append("teardown rc=%d: %s; left: %s" % (rc, _short(failed_tasks(out), err), ", ".join(left[:5])))
    row["lost"] += [p for p in host.lost(after_rerun=False) if p not in row["lost"]]


def check_teardown_point(root, point, row):
    """A teardown killed at one of its task boundaries: after an uninterrupted run, ``--tags teardown`` dies at
    the point; a second teardown must exit 0 with nothing krops owns left and every decoy kept."""
    host = Host(root / "teardown", point)
    try:
        rc, out, err, _s = host.run()
        if rc != 0:
            row["notes"].append("the run before the teardown failed rc=%d: %s" % (rc, _short(failed_tasks(out), err)))
            row["torn_down"] = False
            return row
        kind, _sep, operation = point.partition(":")
        if kind in AWS_FAULTS:  # an AWS delete of the teardown fails once
            getattr(SITE.proxy, AWS_FAULTS[kind])(operation)
        rc, out, err, _s = host.run("--tags", "teardown", fault=True)
        row["fault_rc"] = rc
        if kind in AWS_FAULTS and any(f[2] for f in SITE.proxy.faults):
            row["notes"].append("the fault never fired: the teardown sent no %s" % operation)
        if rc == 0:  # the faulted teardown finished (the fault retried away): it must have left nothing
            left = host.owned_left()
            row["torn_down"] = not left
            row["notes"] += ["BUG teardown rc=0 but left: " + ", ".join(left[:5])] if left else ["finished despite it"]
            row["lost"] += host.lost(after_rerun=False)
        else:
            tear_down(host, row)
    finally:
        host.stop()
    return row


def _short(failed, err):
    if failed:
        name, msg, _tail = failed[0]
        return "%s: %s" % (name, " ".join(str(msg).split())[:300])
    return " ".join(err.split())[-300:]


def diff(expected, actual):
    problems = []
    for name in sorted(set(expected) | set(actual)):
        want, got = set(expected.get(name, [])), set(actual.get(name, []))
        if name not in actual:
            problems.append("%s missing" % name)
        elif name not in expected:
            problems.append("%s extra" % name)
        else:
            # objects controllers generate with random names (events, leases) are not compared
            want = {k for k in want if not k.startswith(("events.k8s.io", "/events", "coordination"))}
            got = {k for k in got if not k.startswith(("events.k8s.io", "/events", "coordination"))}
            if want - got:
                problems.append("%s lacks %s" % (name, ", ".join(sorted(want - got)[:3])))
            if got - want:
                problems.append("%s has extra %s" % (name, ", ".join(sorted(got - want)[:3])))
    return problems


def table(rows):
    lines = ["%-60s %-6s %-9s %-9s %-5s %s" % ("POINT", "RC", "CONVERGED", "TEARDOWN", "LOST", "NOTES")]
    for r in rows:
        lines.append(
            "%-60s %-6s %-9s %-9s %-5s %s"
            % (
                r["point"][:60],
                r["fault_rc"],
                {True: "yes", False: "NO", None: "-"}[r["converged"]],
                {True: "clean", False: "NO", None: "-"}[r["torn_down"]],
                len(r["lost"]),
                " | ".join(r["notes"] + r["lost"])[:400],
            )
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--list", action="store_true", help="print the points of a baseline run and exit")
    parser.add_argument("--limit", type=int, default=0, help="at most this many points, spread over the list")
    parser.add_argument("--only", nargs="*", default=None, help="these points (as --list prints them)")
    parser.add_argument("--checks", default="rerun,teardown", help="rerun, teardown or both (default)")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--env", choices=sorted(ENVS), default="local-host", help="the lifecycle (default local-host)")
    parser.add_argument("--shard", default="1/1", help="K/N: only every N-th chosen point, from the K-th (CI jobs)")
    args = parser.parse_args(argv)
    product_differential.install()  # krops' validators beside the emulator's verdicts, as in the test run
    # the kill points kill the run's process tree (standins/common.kill_the_run): its modules must be children of
    # ansible's workers, not of the warm interpreter (tests/substrate/prewarm.py)
    os.environ["KROPS_PREWARM"] = "0"
    checks = set(args.checks.split(","))
    # a short folder: ansible's local RPC server puts unix sockets (at most 108 bytes) under it
    root = Path(tempfile.mkdtemp(prefix="krops-crash-", dir="/tmp"))
    global PLAYBOOK, INVENTORY, MGMT, SITE  # noqa: PLW0603 (one matrix per process)
    PLAYBOOK, INVENTORY, MGMT = ENVS[args.env]
    if args.env == "aws":
        SITE = AwsSite(root)
    try:
        return _matrix(args, checks, root)
    finally:
        if SITE:
            SITE.stop()


def _matrix(args, checks, root):
    expected, tasks, writes, seconds, teardown_tasks = baseline(root)
    points = enumerate_points(tasks, writes, teardown_tasks)
    print(
        "baseline: %d task boundaries, %d distinct Kubernetes writes, %d AWS deletes, %.0fs; the teardown: %d task "
        "boundaries"
        % (
            len(tasks),
            sum(1 for w in writes if w.startswith("write:")),
            sum(1 for w in writes if w.startswith("aws:")),
            seconds,
            len(teardown_tasks),
        )
    )
    if any(w.startswith("aws:") for w in writes):
        print("AWS deletes: " + " ".join(w.split(":", 1)[1] for w in writes if w.startswith("aws:")))
    if args.list:
        names = {"task:%d" % t["n"]: t["task"] for t in tasks}
        names.update({"teardown:%d" % t["n"]: t["task"] for t in teardown_tasks})
        for point in points:
            print(point + ("  (%s)" % names[point] if point in names else ""))
        return 0
    chosen = args.only if args.only else spread(points, args.limit)
    shard, shards = (int(n) for n in args.shard.split("/"))
    chosen = chosen[shard - 1 :: shards]
    rows = []
    for index, point in enumerate(chosen):
        started = time.monotonic()
        rows.append(check_point(root / ("p%03d" % index), point, expected, checks))
        print("  %s: %.0fs %s" % (point, time.monotonic() - started, rows[-1]["notes"] or "ok"), flush=True)
    print(table(rows))
    print(summary(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    failed = [
        r
        for r in rows
        # a teardown point has no re-run check (converged stays None)
        if ("rerun" in checks and r["converged"] is False)
        or (("teardown" in checks or r["point"].startswith("teardown:")) and not r["torn_down"])
        or r["lost"]
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
