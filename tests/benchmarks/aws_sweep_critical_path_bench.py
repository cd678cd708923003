"""Benchmark: the sweep against the critical path, with realistic (scaled-down) deletion times and per-call latency.

moto sits behind tests/benchmarks/aws_latency_proxy.py, which adds a round trip to every call and holds
EKS node group, EKS cluster, RDS instance and NAT gateway deletions in a deleting state (durations and
their sources in that file, divided by --scale; the sweep's poll intervals are divided by the same
factor). One run prints:

- the sweep's wall time and API calls per resource;
- the reference's sequential order: each cluster's node groups, EKS cluster, RDS instance and NAT
  gateway one after another (the holds summed) on top of the same sweep's calls;
- the critical path: per region the longest chain of holds (node groups then EKS; RDS; NAT), regions
  in parallel, on top of the calls (measured with the holds off);
- the calls per operation as the proxy saw them (where a sweep's calls go).

Targets (issue 9): wall time within 15 % of the critical path, at most 3 calls per resource.

The world: test_aws_sweep_world's three clusters (two regions) and decoys, or with ``--clusters N`` (issue 26)
the scale benchmark's world of N workload clusters and the management cluster over up to 10 regions
(scale_bench.sweep_config: cluster i in region i mod 10, each with test_aws_sweep_world.seed_cluster's full
resource set). It prints one ``scale: sweep-critical-path-ratio n=N <ratio>`` line (wall time over critical
path) beside the table.

    .venv/bin/python tests/benchmarks/aws_sweep_critical_path_bench.py [--latency-ms 20] [--scale 100] [--clusters 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections"), os.path.join(REPO, "tests", "integration"), HERE]

from ansible_collections.krops.platform.plugins.module_utils import aws, aws_delete, aws_sweep  # noqa: E402
from aws_latency_proxy import HOLDS, LatencyProxy  # noqa: E402
from aws_sweep_bench import reset, start_moto  # noqa: E402
from test_aws_sweep_world import BOOTSTRAP_TOML, CLUSTERS, seed_world  # noqa: E402


def world(clusters):
    """(bootstrap.toml text, [(cluster, region, has RDS)], seed(url) -> owned set) of the benchmark's world."""
    if not clusters:
        return BOOTSTRAP_TOML, [(c[0], c[1], bool(c[3])) for c in CLUSTERS], lambda url: seed_world(url)[0]
    import scale_bench
    from test_aws_sweep_world import seed_cluster, seed_global

    text, planned = scale_bench.sweep_config(clusters)

    def seed(url):
        owned = set()
        for name, region, eks, rds in planned:
            owned |= seed_cluster(url, name, region, eks, rds, name)
        return owned | seed_global(url, regions=sorted({c[1] for c in planned}))

    return text, [(name, region, bool(rds)) for name, region, _eks, rds in planned], seed


def sweep(url, toml, proxy, seed):
    params = {
        "config_file": toml,
        "environment": "aws",
        "endpoint_url": proxy.url,
        "access_key": "bench",
        "secret_key": "bench",
        "wait_timeout": 600,
    }
    reset(url)
    owned = seed(url)
    calls_before, ops_before = proxy.calls, dict(proxy.by_operation)
    started = time.monotonic()
    result = aws_sweep.run(params)
    wall = time.monotonic() - started
    deleted = [r for r in result["results"] if r["outcome"] == "deleted"]
    if result["failed"] or len(deleted) != len(owned):
        raise SystemExit("the sweep did not delete the world: {}".format(result["msg"]))
    ops = {k: v - ops_before.get(k, 0) for k, v in proxy.by_operation.items() if v > ops_before.get(k, 0)}
    return wall, proxy.calls - calls_before, len(deleted), ops


def call_table(ops, total):
    """The calls the proxy saw, per operation (busiest first): where a sweep's calls go."""
    lines = ["  calls per operation (seen by the proxy):"]
    ranked = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    width = max(len(name) for name, dummy in ranked)
    lines += [f"    {name:<{width}} {count:4d}" for name, count in ranked]
    lines.append(f"    {'total':<{width}} {total:4d}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="round trip added to every call")
    parser.add_argument("--scale", type=float, default=100.0, help="real deletion times are divided by this")
    parser.add_argument("--clusters", type=int, default=0, help="the scale world of N workload clusters (issue 26)")
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    aws_delete.POLL_FIRST, aws_delete.POLL_MAX = (
        aws_delete.POLL_FIRST / args.scale * 10,
        aws_delete.POLL_MAX / args.scale,
    )
    aws_delete.EXPECTED_SCALE = 1.0 / args.scale
    proc, url = start_moto()
    holds = {k: v / args.scale for k, v in HOLDS.items()}
    text, clusters, seed = world(args.clusters)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as handle:
            handle.write(text)
        latency = args.latency_ms / 1000.0
        calls_only = LatencyProxy(url, latency=latency, scale=1e9)  # holds of about zero: the calls alone
        aws_delete.EXPECTED_SCALE = 0.0  # and no quiet time before the first poll
        sweep(url, handle.name, calls_only, seed)  # warm-up (service models load once per process)
        base = sweep(url, handle.name, calls_only, seed)[0]
        calls_only.stop()
        aws_delete.EXPECTED_SCALE = 1.0 / args.scale
        proxy = LatencyProxy(url, latency=latency, scale=args.scale)
        wall, calls, resources, ops = sweep(url, handle.name, proxy, seed)
        proxy.stop()

        # the reference: per cluster node groups, EKS, RDS, NAT gateway one after another
        reference = base + sum(
            holds["eks-nodegroup"] + holds["eks-cluster"] + holds["nat-gateway"] + (holds["rds-instance"] if rds else 0)
            for dummy3, dummy4, rds in clusters
        )
        # critical path: regions in parallel; per region the longest chain of holds
        per_region = {}
        for dummy3, region, rds in clusters:
            chains = [holds["eks-nodegroup"] + holds["eks-cluster"], holds["nat-gateway"]]
            if rds:
                chains.append(holds["rds-instance"])
            per_region[region] = max([per_region.get(region, 0)] + chains)
        critical = base + max(per_region.values())
        print(
            f"aws_orphan_sweep on moto behind a proxy: {args.latency_ms:.0f} ms per call, deletions held 1/{args.scale:g} of real time"
        )
        print("  holds (s): {}".format(", ".join("{} {:.1f}".format(*kv) for kv in sorted(holds.items()))))
        print("  %-34s %8.2f s" % ("sweep wall time", wall))
        print("  %-34s %8.2f s" % ("reference sequential order", reference))
        print(
            "  %-34s %8.2f s  (calls alone %.2f s + longest chain %.2f s)"
            % ("critical path", critical, base, max(per_region.values()))
        )
        print("  %-34s %8.1f %%  (target <= 15 %%)" % ("over the critical path", (wall / critical - 1) * 100))
        print(
            "  %-34s %8.2f      (%d calls, %d resources; target <= 3)"
            % ("calls per resource", calls / float(resources), calls, resources)
        )
        print(call_table(ops, calls))
        print(
            "scale: sweep-critical-path-ratio n=%d %.3f (at most 1.15; %d clusters, %d regions, load %.1f)"
            % (args.clusters or len(clusters), wall / critical, len(clusters), len(per_region), os.getloadavg()[0])
        )
        os.unlink(handle.name)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)
        aws.CLIENT_HOOKS[:] = []


if __name__ == "__main__":
    main()
