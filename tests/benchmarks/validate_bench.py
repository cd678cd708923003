#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of validate for every environment, against a plain `kubectl kustomize` loop.

Prints, per environment: the time of a full validate (render, schemas, Flux graph, bootstrap.toml
cross-check, SOPS, yamllint), objects per second, and the ratio to the baseline measured in the
same run: `kubectl kustomize DIR` run one after the other over the directories that validate
rendered for that environment (mgmt/<env> and its workload overlays; the reference
implementation's check). Issue 14's targets, checked per environment: cold validate under 15 s
and at most 2x the plain loop.

"cold" is the first validate of an environment with the process caches emptied first (rendered
builds, lint results, compiled schemas and CEL rules), so each environment is measured as if it
ran alone; "cached" is the median of the later runs, which reuse those caches. The 1-minute load
average is printed at the start and the end: the machine is shared, so read the figures with it.
Exit status 1 when an environment is missing or misses a target.

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

from ansible_collections.krops.platform.plugins.module_utils import cel  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import profiles  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import render  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import validate  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import validate_schema  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import validate_yamllint  # noqa: E402

MAX_SECONDS = 15.0
MAX_RATIO = 2.0
# Process caches a later validate reuses; emptied before each environment's cold run.
CACHES = (
    (render, "_BUILD_CACHE"),
    (validate_yamllint, "_LINT_CACHE"),
    (validate_schema, "_SHARED"),
    (cel, "_COMPILED"),
    (cel, "_HAS_RULES"),
    (krops_config, "_CACHE"),
)


def forget_caches():
    for module, name in CACHES:
        cache = getattr(module, name, None)
        if cache is not None:
            cache.clear()


def plain_loop(directories, renderer):
    started = time.monotonic()
    for directory in directories:
        subprocess.run(renderer + [directory], check=True, capture_output=True)
    return time.monotonic() - started


def measure(name, repeat, schema_location, renderer):
    """(directories, cold s, cached s, plain loop s, last result) of one environment."""
    directories, runs, result = [], [], None
    forget_caches()
    for number in range(repeat):
        started = time.monotonic()
        collect = (lambda env: directories.extend(env.directories)) if number == 0 else None
        result = validate.run(REPO, [name], schema_location, collect=collect)
        runs.append(time.monotonic() - started)
    loop = statistics.median(
        plain_loop([os.path.join(REPO, d) for d in directories], renderer) for _round in range(repeat)
    )
    return directories, runs[0], statistics.median(runs[1:] or runs), loop, result


def load():
    return "%.2f" % os.getloadavg()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--schema-location", default=os.environ.get("KROPS_SCHEMA_LOCATION") or os.path.join(REPO, "schemas", "crds")
    )
    args = parser.parse_args()
    renderer = render.find_kustomize()
    present = set(validate.environments_present(REPO))
    print(
        "validate benchmark: %s, renderer %s, %d CPU(s), schemas %s, load average (1 min) at start %s"
        % (REPO, " ".join(renderer), os.cpu_count() or 1, args.schema_location, load())
    )
    print(f"targets per environment: cold validate < {MAX_SECONDS:.0f} s and <= {MAX_RATIO:.0f}x the plain loop")
    header = ("environment", "dirs", "objects", "cold s", "cached s", "loop s", "objects/s", "ratio", "targets")
    print("%-12s %5s %7s %9s %9s %9s %11s %7s  %s" % header)
    failed = []
    for name in profiles.PLATFORMS:  # every environment krops knows, not only the folders found
        if name not in present:
            print("%-12s MISSING: no folder mgmt/%s" % (name, name))
            failed.append(name)
            continue
        directories, cold, cached, loop, result = measure(name, args.repeat, args.schema_location, renderer)
        objects = result["summary"][name]["objects"]
        ratio = cold / loop if loop else float("inf")
        misses = [f"> {MAX_SECONDS:.0f} s"] if cold >= MAX_SECONDS else []
        misses += [f"> {MAX_RATIO:.0f}x"] if ratio > MAX_RATIO else []
        if misses:
            failed.append(name)
        print(
            "%-12s %5d %7d %9.2f %9.2f %9.2f %11.0f %6.2fx  %s"
            % (
                name,
                len(directories),
                objects,
                cold,
                cached,
                loop,
                objects / cold if cold else 0,
                ratio,
                "MISSED " + ", ".join(misses) if misses else "ok",
            )
        )
        if result["findings"]:
            print("  (%d findings in %s)" % (len(result["findings"]), name))
    print("load average (1 min) at end %s" % load())
    print("targets missed by: %s" % (", ".join(failed) if failed else "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
