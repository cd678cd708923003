#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of render_diff and of validate's CEL rule, in one run.

1. render_diff of the whole tree between two revisions of this repository (default: HEAD~1 and
   HEAD; every environment folder present): time to extract and render each revision, time to
   diff (including the transition CEL rules), and the total.
2. validate of every environment with the CEL rule and without it (``cel=False``), alternating,
   the median of N rounds each after one warm-up round (so both use the same process caches):
   the difference is the cost of evaluating the CRDs' x-kubernetes-validations rules.

  .venv/bin/python tests/benchmarks/render_diff_bench.py [--base REV] [--head REV] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections")]

from ansible_collections.krops.platform.plugins.module_utils import cel  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import render_diff  # noqa: E402
from ansible_collections.krops.platform.plugins.module_utils import validate  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", default="HEAD~1")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--schema-location", default=os.environ.get("KROPS_SCHEMA_LOCATION") or os.path.join(REPO, "schemas", "crds")
    )
    args = parser.parse_args()
    print(
        "render_diff benchmark: %s, %d CPU(s), CEL library %s (available: %s)"
        % (REPO, os.cpu_count() or 1, cel.LIBRARY, cel.HAS_CEL)
    )

    started = time.monotonic()
    report = render_diff.run(REPO, args.base, args.head, use_merge_base=False, schema_location=args.schema_location)
    wall = time.monotonic() - started
    seconds = report["seconds"]
    changed = sum(
        len(b[k])
        for env in report["environments"].values()
        for b in env["kustomizations"].values()
        for k in ("added", "changed", "removed")
    )
    print(
        "render+diff %s (%s) -> %s (%s): render base %.2f s, render head %.2f s, diff %.2f s, total %.2f s; "
        "%d environment(s), %d object change(s), %d finding(s)"
        % (
            args.base,
            report["base"][:12],
            args.head,
            report["head"][:12],
            seconds["render_base"],
            seconds["render_head"],
            seconds["diff"],
            wall,
            len(report["environments"]),
            changed,
            len(report["findings"]),
        )
    )

    environments = validate.environments_present(REPO)
    validate.run(REPO, environments, args.schema_location)  # warm-up: renders and schemas cached for both
    with_cel, without_cel, objects, not_evaluated = [], [], 0, 0
    for _round in range(args.repeat):
        for flag, times in ((True, with_cel), (False, without_cel)):
            started = time.monotonic()
            result = validate.run(REPO, environments, args.schema_location, cel=flag)
            times.append(time.monotonic() - started)
            objects = result["objects"]
            if flag:
                not_evaluated = len(result["cel_unevaluable"])
    on, off = statistics.median(with_cel), statistics.median(without_cel)
    print(
        "validate %s (%d objects), median of %d: with CEL %.3f s, without CEL %.3f s, CEL costs %.3f s (%+.0f%%); "
        "%d rule(s) not evaluable"
        % (
            ", ".join(environments),
            objects,
            args.repeat,
            on,
            off,
            on - off,
            100.0 * (on - off) / off if off else 0.0,
            not_evaluated,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
