"""Benchmark: aws_orphan_sweep wall time and API calls per resource, regions concurrent vs one after another.

Seeds the same moto world (three clusters in two regions with their full resource sets, plus
decoys) before every run, then sweeps it with concurrency=1 (the baseline: regions, and the
global S3/IAM deletions, one after another) and concurrency=2 (regions at the same time, global
deletions of one type side by side), both measured in this run. moto answers
in about a millisecond, which hides what concurrency buys against AWS, so each pair is run
twice: as is, and with a simulated round trip added to every call at the HTTP boundary.

    .venv/bin/python tests/benchmarks/aws_sweep_bench.py [--latency-ms 40] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections"), os.path.join(REPO, "tests", "integration")]

from ansible_collections.krops.platform.plugins.module_utils import aws, aws_delete, aws_sweep  # noqa: E402
from test_aws_sweep_world import BOOTSTRAP_TOML, seed_world  # noqa: E402


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto():
    port = free_port()
    log = open(os.path.join(tempfile.gettempdir(), "aws-sweep-bench-moto.log"), "wb")
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = "http://127.0.0.1:%d" % port
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=2).close()
            return proc, url
        except urllib.error.HTTPError:
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("moto_server did not start")


def reset(url):
    urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", method="POST"), timeout=10).close()


def sweep_params(url, toml, concurrency, wait_timeout=60):
    """aws_sweep.run's parameters for the aws environment of ``toml`` against moto at ``url``."""
    return {
        "config_file": toml,
        "environment": "aws",
        "endpoint_url": url,
        "access_key": "bench",
        "secret_key": "bench",
        "concurrency": concurrency,
        "wait_timeout": wait_timeout,
    }


def one_run(url, toml, concurrency, latency):
    reset(url)
    owned = seed_world(url)[0]
    hooks = []
    if latency:
        hooks.append(("before-call", lambda **_kwargs: time.sleep(latency)))
    aws.CLIENT_HOOKS[:] = hooks
    params = sweep_params(url, toml, concurrency)
    started = time.monotonic()
    result = aws_sweep.run(params)
    wall = time.monotonic() - started
    aws.CLIENT_HOOKS[:] = []
    deleted = [r for r in result["results"] if r["outcome"] == "deleted"]
    if result["failed"] or len(deleted) != len(owned):
        raise SystemExit("sweep did not delete the world: {}".format(result["msg"]))
    return wall, result["api_calls"], len(deleted)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=40.0, help="simulated round trip per call (second pair)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (the best is kept)")
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    aws_delete.EXPECTED_SCALE = 0.0  # moto deletes at once: poll from the start, not after AWS's usual durations
    proc, url = start_moto()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as handle:
            handle.write(BOOTSTRAP_TOML)
        one_run(url, handle.name, 2, 0.0)  # warm-up: service models load once per process
        print("aws_orphan_sweep on moto: 3 clusters, 2 regions, full resource sets and decoys")
        print(
            "%-28s %-12s %9s %9s %10s %14s" % ("latency", "regions", "wall s", "calls", "resources", "calls/resource")
        )
        for latency in (0.0, args.latency_ms / 1000.0):
            walls = {}
            for concurrency, label in ((1, "sequential"), (2, "concurrent")):
                best = None
                for dummy in range(args.repeat):
                    run = one_run(url, handle.name, concurrency, latency)
                    best = run if best is None or run[0] < best[0] else best
                wall, calls, resources = best
                walls[label] = wall
                print(
                    "%-28s %-12s %9.2f %9d %10d %14.2f"
                    % (
                        "moto" if not latency else "moto + %.0f ms per call" % (latency * 1000),
                        label,
                        wall,
                        calls,
                        resources,
                        calls / float(resources),
                    )
                )
            print(
                "%-28s %-12s %9.2fx  (baseline: sequential, same run)"
                % ("", "speed-up", walls["sequential"] / walls["concurrent"])
            )
        print("note: moto is one Python process that answers in about a millisecond, so without latency regions")
        print("      mostly queue behind each other there; the latency pair shows what concurrency buys against AWS.")
        os.unlink(handle.name)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)


if __name__ == "__main__":
    main()
