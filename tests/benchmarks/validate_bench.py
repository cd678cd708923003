#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of validate: the whole tree, against a plain `kubectl kustomize` loop.

Prints, per environment and in total: the time of a full validate (render, schemas,
Flux graph, bootstrap.toml cross-check, SOPS, yamllint), objects per second, and the
ratio to the baseline measured in the same run: `kubectl kustomize DIR` run one after
the other over the same directories (the reference implementation's check).
The first validate run is cold (every directory rendered, schemas compiled, files linted);
later runs ("cached") reuse the process caches (content-addressed builds and lint results).
Targets: every environment under 15 s, at most 2x the plain loop (cold).

  .venv/bin/python tests/benchmarks/validate_bench.py [--repeat N] [--schema-location DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections")]

from ansible_collections.krops.platform.plugins.module_utils import render  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import validate  # noqa: E402


def plain_loop(directories, renderer):
    started = time.monotonic()
    for directory in directories:
        subprocess.run(renderer + [directory], check=True, capture_output=True)
    return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--schema-location", default=os.environ.get("KROPS_SCHEMA_LOCATION") or os.path.join(REPO, "schemas", "crds")
    )
    args = parser.parse_args()
    renderer = render.find_kustomize()
    environments = validate.environments_present(REPO)
    print(
        "validate benchmark: %s, renderer %s, %d CPU(s), schemas %s"
        % (REPO, " ".join(renderer), os.cpu_count() or 1, args.schema_location)
    )
    header = ("environment", "dirs", "objects", "cold s", "cached s", "loop s", "objects/s", "ratio", "15s")
    print("%-12s %5s %7s %9s %9s %9s %11s %7s %7s" % header)
    worst = 0.0
    for name in environments:
        directories = []
        for top in (f"mgmt/{name}", f"workload/{name}"):
            if os.path.isdir(os.path.join(REPO, top)):
                directories.extend(render.find_kustomization_dirs(os.path.join(REPO, top)))
        loops = [plain_loop(directories, renderer) for _round in range(args.repeat)]
        runs, result = [], None
        for _round in range(args.repeat):
            started = time.monotonic()
            result = validate.run(REPO, [name], args.schema_location)
            runs.append(time.monotonic() - started)
        cold, warm, loop = runs[0], statistics.median(runs[1:] or runs), statistics.median(loops)
        objects = result["summary"][name]["objects"]
        ratio = cold / loop if loop else float("inf")
        worst = max(worst, ratio)
        print(
            "%-12s %5d %7d %9.2f %9.2f %9.2f %11.0f %6.2fx %7s"
            % (
                name,
                len(directories),
                objects,
                cold,
                warm,
                loop,
                objects / cold if cold else 0,
                ratio,
                "ok" if cold < 15 else "SLOW",
            )
        )
        if result["findings"]:
            print("  (%d findings in %s)" % (len(result["findings"]), name))
    print(f"worst ratio to the plain kustomize loop (cold): {worst:.2f}x (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
