#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Scale benchmark (issue 26): how validate, render_diff and the Flux hand-off wait grow with the number of clusters.

For each n (default 1, 10, 50) tests/substrate/scale_env.py writes an aws environment of n workload
clusters over 10 regions and 3 accounts into a temporary copy of this repository (a real config, ACK's
cross-account map and namespaces included: the benchmark fails when validate finds anything in it). Each measure runs in its own process, so
its peak memory (ru_maxrss of that Python process) is its own:

- validate-cold: validate of the aws environment with empty process caches (validate-cold-cpu: its CPU seconds,
  the kustomize and yamllint worker processes included: the figure the machine's load does not change);
- validate-cached: the median of the next runs in the same process (rendered builds and schemas reused);
- render_diff: the n-cluster tree against the same tree with one pull request's change (cluster 0's
  x86 pool scaled from 2 to 3), both revisions extracted and rendered;
- flux_handoff: krops.platform.flux_handoff scope=wait (a real ansible-playbook against the
  Kubernetes emulator) on n x 10 Kustomizations, the last one turned Ready 1 s after the wait
  starts: the task's whole time and its delay after that last Ready;
- pivot: krops.platform.capi_pivot moving n + 2 Clusters with their Machines and DockerClusters between two
  Kubernetes emulators (test_pivot's n-cluster test; the clusterctl stand-in moves them over HTTP), so it
  measures krops' own pivot work against the object count, not real clusterctl's move;
- sweep: krops.platform.aws_orphan_sweep over moto seeded with n workload clusters and the management cluster
  (full resource sets, up to 10 regions, one account): its wall time and the AWS API calls per deleted
  resource (target: at most 3); sweep-3-accounts: the same clusters spread over 3 accounts
  ([[environments.aws.accounts]], cluster i in account i mod 3), each account swept through its assumed role.

Prints one line per measure, ``scale: <measure> n=1 <s> n=10 <s> n=50 <s> growth <k>`` where k is the
least-squares slope of log(seconds) over log(n), then the peak memory per measure and n. Targets:
k <= 1.15 for every measure, validate-cold at n=50 under 10 s. Exit status 1 when one is missed.
The machine's 1-minute load average is printed at the start and the end.

  .venv/bin/python tests/benchmarks/scale_bench.py [--sizes 1,10,50] [--repeat 3] [--only validate,render_diff,flux_handoff,pivot,sweep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections")]

MAX_GROWTH = 1.15
MAX_VALIDATE_AT_50 = 10.0
MAX_CALLS_PER_RESOURCE = 3.0
SCHEMAS = os.environ.get("KROPS_SCHEMA_LOCATION") or os.path.join(REPO, "schemas", "crds")
MEASURES = ("validate", "render_diff", "flux_handoff", "pivot", "sweep")


def growth(points):
    """Least-squares slope of log(seconds) against log(n) over (n, seconds) points."""
    xs = [math.log(n) for n, _s in points]
    ys = [math.log(max(s, 1e-6)) for _n, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    denominator = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / denominator if denominator else 0.0


def peak(who=resource.RUSAGE_SELF):
    """Peak resident memory (MiB) of this process (kustomize runs apart, each bounded by render.bounded), or of its
    largest child (RUSAGE_CHILDREN: the pivot's pytest process)."""
    return round(resource.getrusage(who).ru_maxrss / 1024.0, 1)


# ---- workers: one process per (measure, n) ------------------------------------------------------


def generated(n, workdir):
    from tests.substrate import scale_env

    root = scale_env.copy_repository(REPO, os.path.join(workdir, "repo"))
    plan = scale_env.write(root, n)
    head = scale_env.commit(root, "scale: %d workload clusters" % n)
    return root, plan, head


def work_validate(n, repeat, workdir):
    from ansible_collections.krops.platform.plugins.module_utils import validate

    root, _plan, _head = generated(n, workdir)
    runs, result, cpu = [], None, None
    for _number in range(repeat):
        before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        started = time.monotonic()
        result = validate.run(root, ["aws"], SCHEMAS)
        runs.append(time.monotonic() - started)
        if cpu is None:  # the cold run's CPU seconds, its kustomize and yamllint processes included
            after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
            cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
    if result["findings"]:
        raise SystemExit(
            "validate found %d problem(s) in the generated tree: %s" % (len(result["findings"]), result["findings"][:3])
        )
    summary = result["summary"]["aws"]
    return {
        "validate-cold": runs[0],
        "validate-cold-cpu": cpu,
        "validate-cached": statistics.median(runs[1:] or runs),
        "objects": summary["objects"],
        "directories": summary["directories"],
    }


def work_render_diff(n, repeat, workdir):
    from ansible_collections.krops.platform.plugins.module_utils import render_diff
    from tests.substrate import scale_env

    root, plan, base = generated(n, workdir)
    path = os.path.join(root, "mgmt/aws/aws-managed-clusters", plan[0].region, plan[0].name + ".yaml")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    marker = "  name: %s-x86\n  namespace: default\nspec:\n  clusterName: %s\n  replicas: 2\n" % (
        plan[0].name,
        plan[0].name,
    )
    if marker not in text:
        raise SystemExit("render_diff: the generated cluster %s has no x86 pool to scale" % plan[0].name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(marker, marker.replace("replicas: 2", "replicas: 3")))
    head = scale_env.commit(root, "scale the x86 pool of %s" % plan[0].name)
    runs, report = [], None
    for _number in range(max(1, repeat - 1)):
        started = time.monotonic()
        report = render_diff.run(root, base, head, use_merge_base=False, environments=["aws"], schema_location=SCHEMAS)
        runs.append(time.monotonic() - started)
    changed = sum(
        len(b[k])
        for env in report["environments"].values()
        for b in env["kustomizations"].values()
        for k in ("added", "changed", "removed")
    )
    if changed != 1:
        raise SystemExit("render_diff: expected the one changed MachinePool, the report has %d change(s)" % changed)
    return {"render_diff": statistics.median(runs)}


def work_flux_handoff(n, repeat, workdir):
    """flux_handoff scope=wait on n x 10 Kustomizations; the last turns Ready 1 s after the wait first lists them."""
    import datetime

    import yaml

    from tests.substrate.fixtures import VENV_BIN, playbook_env
    from tests.substrate.kube_emulator import KubeEmulator

    ns, ks, fi = (
        "flux-system",
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
        ("fluxcd.controlplane.io/v1", "FluxInstance"),
    )
    count = n * 10
    tmp = os.path.join(workdir, "flux")
    os.makedirs(tmp)
    api = KubeEmulator("scale").load_krops_crds().start()
    try:
        kubeconfig = api.write_kubeconfig(os.path.join(tmp, "kubeconfig"), context="scale")
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        api.create({"apiVersion": fi[0], "kind": fi[1], "metadata": {"name": "flux", "namespace": ns}, "spec": {}})
        api.set_condition(*fi, "flux", ns)
        # the sync root flux-system (the wait needs it) and n x 10 - 1 more, in dependsOn chains of 10
        names = ["flux-system"] + ["ks-%04d" % i for i in range(1, count)]
        for index, name in enumerate(names):
            spec = {"dependsOn": [{"name": names[index - 1]}]} if index % 10 else {}
            api.create({"apiVersion": ks[0], "kind": ks[1], "metadata": {"name": name, "namespace": ns}, "spec": spec})
            api.set_condition(*ks, name, ns, status="True", reason="ReconciliationSucceeded")
        last = names[-1]
        task = {
            "name": "wait",
            "krops.platform.flux_handoff": {
                "kubeconfig": kubeconfig,
                "environment": "local-host",
                "config_file": os.path.join(REPO, "bootstrap.toml"),
                "scope": "wait",
                "wait_timeout": 300,
                "progress_interval": 30,
            },
        }
        play = os.path.join(tmp, "play.yml")
        with open(play, "w", encoding="utf-8") as handle:
            yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}], handle, sort_keys=False)
        inventory = os.path.join(tmp, "hosts.yml")
        with open(inventory, "w", encoding="utf-8") as handle:
            handle.write(
                "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
            )
        totals, delays = [], []
        ks_path = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations"
        for _number in range(max(1, repeat - 1)):
            api.set_condition(*ks, last, ns, status="False", reason="Progressing")
            seen, flipped = len(api.requests), {}

            def flipper(seen, flipped):
                while not any(path.startswith(ks_path) for _m, path in api.requests[seen:]):
                    time.sleep(0.02)
                time.sleep(1.0)
                flipped["at"] = time.time()
                api.set_condition(*ks, last, ns, reason="ReconciliationSucceeded")

            thread = threading.Thread(target=flipper, args=(seen, flipped), daemon=True)
            thread.start()
            proc = subprocess.run(
                [os.path.join(str(VENV_BIN), "ansible-playbook"), play, "-i", inventory],
                cwd=REPO,
                env=playbook_env(__import__("pathlib").Path(tmp)),
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            output = json.loads(proc.stdout)
            result = output["plays"][0]["tasks"][0]
            if proc.returncode != 0:
                raise SystemExit("flux_handoff failed at n=%d: %s" % (n, json.dumps(result["hosts"])[:2000]))
            duration = result["task"]["duration"]
            start, end = (
                datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")).timestamp()
                for k in ("start", "end")
            )
            totals.append(end - start)
            delays.append(end - flipped["at"])
            reported = len(result["hosts"]["localhost"].get("kustomizations") or [])
            if reported != count:
                raise SystemExit("flux_handoff at n=%d reported %d Kustomization(s), not %d" % (n, reported, count))
        return {"flux_handoff": statistics.median(totals), "flux_handoff-delay": statistics.median(delays)}
    finally:
        api.stop()


def work_pivot(n, repeat, workdir):
    """krops.platform.capi_pivot of a kind cluster holding n workload Clusters (+ the management Cluster and one
    more), each with its Machine and DockerCluster, onto the target emulator: test_pivot's n-cluster test, whose
    clusterctl stand-in moves the objects over HTTP. The figure is the module's whole run (preflight, charts,
    providers, the move, the verification), not real clusterctl's move."""
    runs, objects = [], 0
    for number in range(max(1, repeat - 1)):
        timing = os.path.join(workdir, "pivot-%d.json" % number)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
            + ["tests/integration/test_pivot.py", "-k", "n_workload_clusters"],
            cwd=REPO,
            env=dict(os.environ, KROPS_PIVOT_CLUSTERS=str(n), KROPS_PIVOT_TIMING=timing),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not os.path.exists(timing):
            raise SystemExit("pivot at n=%d failed:\n%s" % (n, proc.stdout[-3000:]))
        with open(timing, encoding="utf-8") as handle:
            figures = json.load(handle)
        runs.append(figures["pivot"])
        objects = figures["objects"]
    # the module runs in the pytest child, so its peak memory is the child's
    return {"pivot": statistics.median(runs), "objects": objects, "peak_mib": peak(resource.RUSAGE_CHILDREN)}


SWEEP_REGIONS = (
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ap-southeast-1",
)


def sweep_config(n):
    """bootstrap.toml of an aws environment with n workload clusters over the 10 regions (cluster i in region
    i mod 10), and the clusters as test_aws_sweep_world.seed_cluster takes them."""
    from test_aws_sweep_world import BOOTSTRAP_TOML

    clusters = [("eu-north-1-management", "eu-north-1", "default_eu-north-1-management-control-plane", "")]
    for i in range(n):
        region = SWEEP_REGIONS[i % len(SWEEP_REGIONS)]
        name = "c%d-%s" % (i, region)  # unique in its first 20 characters (the seeded load balancers are named so)
        clusters.append((name, region, "default_%s-control-plane" % name, "krops-%s-db" % name))
    head, _sep, rest = BOOTSTRAP_TOML.partition("[environments.aws.teardown]")
    tail = rest[rest.index("[environments.local-host]") :]
    entries = "".join(
        '\n[[environments.aws.teardown.aws-workloads]]\nregion = "%s"\ncluster-name = "%s"\n'
        'eks-cluster-name = "%s"\nrds-instance = "%s"\n' % (region, name, eks, rds)
        for name, region, eks, rds in clusters[1:]
    )
    teardown = '[environments.aws.teardown]\ncapi-workloads = [%s]\nmgmt-eks-cluster-name = "%s"\n' % (
        ", ".join('"%s"' % c[0] for c in clusters[1:]),
        clusters[0][2],
    )
    return head + teardown + entries + "\n" + tail, clusters


# The scale generator's accounts (tests/substrate/scale_env.py ACCOUNTS): cluster i in account i mod 3.
SWEEP_ACCOUNTS = ("000000000000", "111111111111", "222222222222")


def sweep_accounts_config(text, clusters):
    """The bootstrap.toml of sweep_config with the three accounts listed, each through role krops-teardown and
    with its clusters (cluster i, the management cluster first, in account i mod 3)."""
    accounts = "".join(  # an account without a cluster (n=1: the third) is not listed
        '[[environments.aws.accounts]]\naccount-id = "%s"\nrole-name = "krops-teardown"\nclusters = [%s]\n\n'
        % (account, ", ".join('"%s"' % c[0] for c in clusters[index :: len(SWEEP_ACCOUNTS)]))
        for index, account in enumerate(SWEEP_ACCOUNTS)
        if clusters[index :: len(SWEEP_ACCOUNTS)]
    )
    return text.replace("[environments.aws.teardown]\n", accounts + "[environments.aws.teardown]\n", 1)


def _account_clients(url, account):
    """test_aws_sweep_world.clients for ``account`` (moto: credentials of an assumed role in that account)."""
    import boto3

    sts = boto3.client(
        "sts", endpoint_url=url, region_name="eu-north-1", aws_access_key_id="bench", aws_secret_access_key="bench"
    )
    found = sts.assume_role(RoleArn="arn:aws:iam::%s:role/seed" % account, RoleSessionName="seed")["Credentials"]
    session = boto3.session.Session(
        aws_access_key_id=found["AccessKeyId"],
        aws_secret_access_key=found["SecretAccessKey"],
        aws_session_token=found["SessionToken"],
    )
    cache = {}

    def clients(endpoint, region):
        def make(service):
            if (region, service) not in cache:
                cache[(region, service)] = session.client(service, endpoint_url=endpoint, region_name=region)
            return cache[(region, service)]

        return make

    return clients


def _seed_accounts(url, clusters):
    """Cluster i (the management cluster first) in account i mod 3, and the global user and the stacks of its
    regions in each account that has a cluster."""
    import test_aws_sweep_world as world

    owned, original = set(), world.clients
    try:
        for index, account in enumerate(SWEEP_ACCOUNTS):
            mine = clusters[index :: len(SWEEP_ACCOUNTS)]
            if not mine:
                continue
            world.clients = _account_clients(url, account)
            for name, region, eks, rds in mine:
                owned |= {(account,) + item for item in world.seed_cluster(url, name, region, eks, rds, name, account)}
            regions = sorted({c[1] for c in mine})  # the stack in each of the account's regions
            owned |= {(account,) + item for item in world.seed_global(url, regions=regions)}
    finally:
        world.clients = original
    return owned


def work_sweep(n, repeat, workdir):
    """krops.platform.aws_orphan_sweep (aws_sweep.run, in-process) over moto seeded with n workload clusters and
    the management cluster, each with its full resource set, in up to 10 regions and one account: wall time and
    AWS API calls per deleted resource (target at most 3). Then the same clusters over 3 accounts (cluster i in
    account i mod 3, each account listed in bootstrap.toml and swept through its role): sweep-3-accounts, after
    the orphan report of those accounts (mode report, every owned resource reported): report-3-accounts."""
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    import aws_sweep_bench

    from ansible_collections.krops.platform.plugins.module_utils import aws_delete, aws_sweep
    from test_aws_sweep_world import seed_cluster, seed_global

    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    aws_delete.EXPECTED_SCALE = 0.0  # moto deletes at once: poll from the start
    text, clusters = sweep_config(n)
    toml = os.path.join(workdir, "bootstrap.toml")
    with open(toml, "w", encoding="utf-8") as handle:
        handle.write(text)
    proc, url = aws_sweep_bench.start_moto()
    try:
        runs = []
        for _number in range(max(1, repeat - 1)):
            aws_sweep_bench.reset(url)
            owned = set()
            for name, region, eks, rds in clusters:
                owned |= seed_cluster(url, name, region, eks, rds, name)
            owned |= seed_global(url, regions=sorted({c[1] for c in clusters}))
            params = aws_sweep_bench.sweep_params(url, toml, 2, wait_timeout=120)
            started = time.monotonic()
            result = aws_sweep.run(params)
            wall = time.monotonic() - started
            deleted = [r for r in result["results"] if r["outcome"] == "deleted"]
            if result["failed"] or len(deleted) != len(owned):
                raise SystemExit(
                    "sweep at n=%d: %d of %d deleted: %s" % (n, len(deleted), len(owned), result.get("msg"))
                )
            runs.append((wall, result["api_calls"] / float(len(deleted)), len(deleted)))
        # the same clusters spread over 3 accounts (cluster i in account i mod 3), each swept through its role
        toml3 = os.path.join(workdir, "bootstrap-accounts.toml")
        with open(toml3, "w", encoding="utf-8") as handle:
            handle.write(sweep_accounts_config(text, clusters))
        runs3 = []
        for _number in range(max(1, repeat - 1)):
            aws_sweep_bench.reset(url)
            owned = _seed_accounts(url, clusters)
            params = aws_sweep_bench.sweep_params(url, toml3, 2, wait_timeout=120)
            # the orphan report first, over the same accounts (each through its role): read-only
            started = time.monotonic()
            report = aws_sweep.run(dict(params, mode="report", min_age_hours=0))
            report_wall = time.monotonic() - started
            reported = report["report"]["json"]["count"]
            if report["failed"] or reported != len(owned):
                raise SystemExit(
                    "orphan report of 3 accounts at n=%d: %d of %d owned reported: %s"
                    % (n, reported, len(owned), report.get("msg"))
                )
            started = time.monotonic()
            result = aws_sweep.run(params)
            wall = time.monotonic() - started
            deleted = [r for r in result["results"] if r["outcome"] == "deleted"]
            listed = list(SWEEP_ACCOUNTS[: len(clusters)])
            if result["failed"] or len(deleted) != len(owned) or result["account_ids"] != listed:
                raise SystemExit(
                    "sweep of 3 accounts at n=%d: %d of %d deleted: %s"
                    % (n, len(deleted), len(owned), result.get("msg"))
                )
            runs3.append(
                (
                    wall,
                    result["api_calls"] / float(len(deleted)),
                    len(deleted),
                    result["api_calls_by_operation"],
                    report_wall,
                    report["api_calls"] / float(reported),
                )
            )
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)
    wall, per_resource, resources = sorted(runs)[len(runs) // 2]
    wall3, per_resource3, resources3, by_operation, report3, report_calls3 = sorted(runs3, key=lambda r: r[:3])[
        len(runs3) // 2
    ]
    return {
        "sweep": wall,
        "sweep-calls-per-resource": per_resource,
        "objects": resources,
        "sweep-3-accounts": wall3,
        "sweep-3-accounts-calls-per-resource": per_resource3,
        "objects-3-accounts": resources3,
        "report-3-accounts": report3,
        "report-3-accounts-calls-per-resource": report_calls3,
        # where the calls went (the ten most frequent operations): the fixed per-account ones show at n=1
        "calls-3-accounts": dict(sorted(by_operation.items(), key=lambda kv: (-kv[1], kv[0]))[:10]),
    }


WORKERS = {
    "sweep": work_sweep,
    "validate": work_validate,
    "render_diff": work_render_diff,
    "flux_handoff": work_flux_handoff,
    "pivot": work_pivot,
}


def worker(measure, n, repeat):
    with tempfile.TemporaryDirectory(prefix="krops-scale-") as workdir:
        figures = WORKERS[measure](n, repeat, workdir)
    figures.setdefault("peak_mib", peak())
    print("SCALE-RESULT " + json.dumps(figures))


# ---- driver -------------------------------------------------------------------------------------


def run_worker(measure, n, repeat):
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", measure, "--n", str(n), "--repeat", str(repeat)],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("SCALE-RESULT "):
            return json.loads(line[len("SCALE-RESULT ") :])
    raise SystemExit(
        "scale: %s at n=%d failed (exit %d):\n%s%s"
        % (measure, n, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,10,50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(MEASURES))
    parser.add_argument("--worker", choices=MEASURES)
    parser.add_argument("--n", type=int)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.n, args.repeat)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    measures = [m for m in args.only.split(",") if m]
    unknown = sorted(set(measures) - set(MEASURES))
    if unknown:
        parser.error("unknown measure(s) %s; known: %s" % (", ".join(unknown), ", ".join(MEASURES)))
    print(
        "scale benchmark: %s, %d CPU(s), load average (1 min) at start %.2f"
        % (REPO, os.cpu_count() or 1, os.getloadavg()[0])
    )
    print(
        "targets: growth k <= %.2f for every measure; validate-cold at n=50 < %.0f s" % (MAX_GROWTH, MAX_VALIDATE_AT_50)
    )
    table, memory, notes = {}, [], []
    for measure in measures:
        for n in sizes:
            figures = run_worker(measure, n, args.repeat)
            for key, value in figures.items():
                if key == "peak_mib":
                    continue
                if key in ("objects", "directories", "objects-3-accounts"):
                    notes.append("%s n=%d: %s %d" % (measure, n, key, value))
                    continue
                if isinstance(value, dict):
                    notes.append("%s n=%d: %s %s" % (measure, n, key, " ".join("%s=%d" % kv for kv in value.items())))
                    continue
                table.setdefault(key, []).append((n, value))
            memory.append((measure, n, figures["peak_mib"]))
            print("  %s n=%d done: %s" % (measure, n, json.dumps(figures)), flush=True)
    missed = []
    for key, points in table.items():
        k = growth(points) if len(points) > 1 else 0.0
        line = "scale: %s %s growth %.2f" % (key, " ".join("n=%d %.2f" % (n, s) for n, s in points), k)
        if key.endswith("-calls-per-resource"):
            worst = max(s for _n, s in points)
            if worst > MAX_CALLS_PER_RESOURCE:
                missed.append("%s %.2f" % (key.replace("-", " "), worst))
            print(
                "scale: %s %s (at most %.0f)" % (key, " ".join("n=%d %.2f" % p for p in points), MAX_CALLS_PER_RESOURCE)
            )
            continue
        if k > MAX_GROWTH and not key.endswith("-delay"):
            missed.append("%s growth %.2f" % (key, k))
        if key == "validate-cold":
            at50 = dict(points).get(50)
            if at50 is not None and at50 >= MAX_VALIDATE_AT_50:
                missed.append("validate-cold at n=50 %.2f s" % at50)
        print(line)
    for measure in measures:
        row = [(n, mib) for m, n, mib in memory if m == measure]
        print(
            "scale: peak-memory %s %s MiB growth %.2f"
            % (measure, " ".join("n=%d %.0f" % p for p in row), growth(row) if len(row) > 1 else 0.0)
        )
    for note in notes:
        print("scale: %s" % note)
    print("load average (1 min) at end %.2f" % os.getloadavg()[0])
    print("targets missed: %s" % (", ".join(missed) if missed else "none"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
