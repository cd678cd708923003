# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the AWS orphan sweep sweeps: its targets (the clusters of an environment, each in its region) read from
bootstrap.toml, and the error of a sweep that cannot start."""

from __future__ import annotations

import dataclasses

from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import aws_rows as rows


class SweepError(errors.ConfigError):
    """The sweep cannot start: bad options or configuration. The message says what to fix."""


@dataclasses.dataclass(eq=False)
class Target:
    """One cluster whose AWS resources the sweep owns."""

    cluster: str
    region: str
    eks_name: str = ""
    rds_instance: str = ""
    role: str = "workload"

    @property
    def names(self):
        """The exact names CAPA tags this cluster's resources with: the CAPI cluster and its EKS cluster."""
        return [n for n in (self.cluster, self.eks_name) if n]

    def as_dict(self):
        return {
            "cluster": self.cluster,
            "region": self.region,
            "eks_cluster_name": self.eks_name,
            "rds_instance": self.rds_instance,
            "role": self.role,
        }


def environment_targets(cfg, name, include_management=True):
    """Every cluster of environment ``name`` with its region: each aws-workloads entry in its own region,
    the management cluster in the environment's mgmt-region (checked by the loader)."""
    env = cfg.environment(name)
    targets = [Target(w.cluster_name, w.region, w.eks_cluster_name, w.rds_instance) for w in env.teardown.aws_workloads]
    if include_management:
        targets.append(
            Target(
                env.mgmt_cluster,
                env.mgmt_region,
                env.teardown.mgmt_eks_cluster_name,
                "",
                role="management",
            )
        )
    return targets


def targets_from_config(cfg, environment=None, include_management=True, regions=None):
    """(targets, all_regions_of_the_environment) from a loaded Config; SweepError on bad input."""
    name = environment or cfg.selected
    env = cfg.environment(name)
    if profiles.of(env).cloud != "aws":
        raise SweepError(
            "environment {!r} in {} is of kind {}; aws_orphan_sweep sweeps only environments of kind aws "
            "(valid: {})".format(
                name,
                cfg.path,
                env.platform,
                ", ".join(n for n in cfg.environment_names if profiles.of(cfg.environment(n)).cloud == "aws") or "none",
            )
        )
    every = environment_targets(cfg, name, True)
    all_regions = rows.unique(t.region for t in every)
    targets = every if include_management else [t for t in every if t.role != "management"]
    if regions is not None and not regions:  # an empty list must not silently mean every region
        raise SweepError(
            "regions is an empty list; leave it out to sweep every region of environment {!r} ({}), "
            "or name the regions".format(name, ", ".join(all_regions) or "none")
        )
    if regions:
        unknown = [r for r in regions if r not in all_regions]
        if unknown:
            raise SweepError(
                "regions {} are not regions of environment {!r} (its regions: {}); fix the regions option".format(
                    ", ".join(unknown), name, ", ".join(all_regions) or "none"
                )
            )
        targets = [t for t in targets if t.region in regions]
    if not targets:
        raise SweepError(
            f"environment {name!r} in {cfg.path} names no AWS cluster to sweep (no aws-workloads and "
            "include_management is false)"
        )
    return targets, all_regions


def account_targets(account, targets):
    """The targets swept in an account: its clusters (every cluster when it names none) in its regions (every
    region when it names none)."""
    regions, clusters = account.regions, account.clusters
    return [t for t in targets if (not regions or t.region in regions) and (not clusters or t.cluster in clusters)]
