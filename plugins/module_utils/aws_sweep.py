# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep: delete (or report) exactly what a krops environment owns in AWS.

Targets come from bootstrap.toml: every ``[[environments.<env>.teardown.aws-workloads]]``
entry plus, optionally, the self-managed management cluster. A resource is a candidate
only when it is tagged ``sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>=owned`` or
``kubernetes.io/cluster/<cluster>=owned`` for a target cluster, or when bootstrap.toml names
it exactly (EKS cluster, RDS instance, S3 bucket pattern, global IAM roles and users,
CloudFormation stack); a name prefix never decides (it only makes a report candidate). A few
dependants that carry no tags of their own are swept with their owner and say so in
``reason``: node groups and pod identity associations of an owned EKS cluster, the DB
subnet group of a swept RDS instance (when no other instance uses it) and detached network
interfaces inside an owned VPC.

The type table (REGION_TYPES, GLOBAL_TYPES) lists rows defined per service (aws_ec2, aws_eks, aws_elb,
aws_rds, aws_iam, aws_s3, aws_cloudformation, aws_tagging; the row type is aws_rows.ResourceType); its order
is the deletion order. Per region (regions concurrently) the chains run side by side: EKS node groups
(waited), pod identity associations, clusters (waited); self-managed instances (waited); RDS instances
(waited) and their subnet groups; load balancers and target groups; NAT gateways (waited) and elastic IPs.
Then launch templates, EBS volumes and snapshots, and the network: detached interfaces, subnets, internet
gateways, route tables, security groups, VPCs. Then the global phase: S3 buckets, IAM roles, OIDC
providers, users, customer managed policies, the clusterawsadm stack (waited). Finally every region is
listed again: anything owned that is left is a leftover (EC2 ids this run saw go are not described again:
they are never reused). With a step budget (the action plugin) a wait still running when it ends is cut and
the next step resumes from the returned state without listing again.

Report mode lists the same candidates read-only and keeps those older than N hours.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.krops.platform.plugins.module_utils import (
    aws,
    aws_cloudformation,
    aws_ec2,
    aws_eks,
    aws_logs,
    aws_elb,
    aws_iam,
    aws_rds,
    aws_report,
    aws_s3,
    aws_tagging,
)
from ansible_collections.krops.platform.plugins.module_utils import aws_rows as rows
from ansible_collections.krops.platform.plugins.module_utils import config as config_mod
from ansible_collections.krops.platform.plugins.module_utils import contract
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError

ARN_TYPES = aws_tagging.ARN_TYPES
GLOBAL, ABSENT = rows.GLOBAL, rows.ABSENT
arn_type = rows.arn_type

# Poll delays while waiting for a deletion or retrying a DependencyViolation (seconds).
POLL_FIRST = 0.5
POLL_MAX = 30.0
# The first poll of a wait comes after this part of the type's expected deletion time (times EXPECTED_SCALE,
# which the benchmark lowers with its scaled-down deletions): fewer calls, little lateness.
FIRST_POLL_SHARE = 1.0
# Then every this part of it (within POLL_FIRST..POLL_MAX).
POLL_SHARE = 0.05
EXPECTED_SCALE = 1.0
try:  # tests and benchmarks that hold deletions for a scaled-down time say so (a bad value is ignored)
    EXPECTED_SCALE = max(0.0, float(os.environ.get("KROPS_AWS_SWEEP_TIME_SCALE") or 1.0))
except ValueError:
    pass
DEPENDENCY_BUDGET = 180


class SweepError(errors.ConfigError):
    """The sweep cannot start: bad options or configuration. The message says what to fix."""


class Target:
    """One cluster whose AWS resources the sweep owns."""

    def __init__(self, cluster, region, eks_name="", rds_instance="", role="workload"):
        self.cluster = cluster
        self.region = region
        self.eks_name = eks_name
        self.rds_instance = rds_instance
        self.role = role

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
    all_regions = _unique(t.region for t in every)
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


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _now():
    return datetime.datetime.now(datetime.UTC)


_resource = rows.resource


def public(resource, outcome, reason=None):
    """The result entry users see for a resource."""
    return {
        "region": resource["region"],
        "type": resource["type"],
        "id": resource["id"],
        "cluster": resource["cluster"],
        "outcome": outcome,
        "reason": resource.get("reason", "") if reason is None else reason,
    }


class Discovery:
    """Read-only listing of everything the targets own in one region (or globally): the rows' list handlers read
    it. Listings several rows share (EC2 tags, the Tagging API, EKS clusters, RDS) are made once (cached())."""

    def __init__(self, sweep, region, confirm=True):
        self.sweep = sweep
        self.region = region
        # False for delete mode's listing: a delete that finds nothing answers "absent" itself, so rows that list
        # owned ids from a tag walk need not describe them first to confirm they still exist (aws_ec2)
        self.confirm = confirm
        self.targets = [t for t in sweep.targets if t.region == region]
        self.clusters = [t.cluster for t in self.targets]
        self.errors = []
        self.warnings = []
        self.candidates = []
        self._cache = {}

    def owner_of(self, tags):
        """The owning cluster ("" when only the krops environment tag proves it), or None (ownership.py)."""
        claim = self.sweep.ownership.owner(tags)
        return None if claim is None else claim[0]

    def client(self, service):
        return self.sweep.conn.client(service, self.region)

    def cached(self, key, func, guard=None, empty=()):
        """func() once per discovery. With ``guard`` (a type name) a failure is recorded once under that name and
        every reader gets ``empty``; without, it is raised to each reader (and not retried)."""
        if key not in self._cache:
            if guard:
                self._cache[key] = (True, self.guard(guard, func, empty))
            else:
                try:
                    self._cache[key] = (True, func())
                except (ClientError, BotoCoreError, aws.AwsError) as exc:
                    self._cache[key] = (False, exc)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    def seed(self, key, value):
        self._cache[key] = (True, value)

    def listing(self, key, func, region=None):
        """func(): a whole listing (one call and its pages); in the final pass, the last poll of a wait that made the
        same call after the row's last deletion there (Sweep.take_watched): a second listing repeats it."""
        found = self.sweep.take_watched((region or self.region, key)) if self.sweep.final else None
        return func() if found is None else found

    def guard(self, rtype, func, empty=()):
        empty = list(empty) if isinstance(empty, tuple) else empty
        try:
            found = func()
            return empty if found is None else found
        except aws.UnsupportedOperation as exc:
            self.warnings.append(f"{self.region}: {rtype} skipped: {exc}")
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            error = {
                "region": self.region,
                "type": rtype,
                "error": f"listing {rtype} in {self.region} failed: {aws.error_message(exc)}",
            }
            if error not in self.errors:
                self.errors.append(error)
        return empty

    def resources(self, types, with_age=False):
        """Every owned resource of the types, one listing per row, in table order."""
        found = []
        for rtype in types:
            found += self.guard(rtype.name, lambda t=rtype: t.list(self, with_age))
        return found


class Sweep:
    """One sweep (delete, plan or report) over a set of targets."""

    def __init__(
        self,
        conn,
        targets,
        cfg,
        environment,
        account_id,
        wait_timeout=1200,
        concurrency=None,
        sweep_global_users=True,
        sleep=time.sleep,
        clock=time.monotonic,
        progress=None,
        budget=None,
        resume=None,
    ):
        self.conn = conn
        self.cfg = cfg
        self.environment = environment
        self.targets = targets
        self.regions = _unique(t.region for t in targets)
        self.home_region = self.regions[0]
        self.account_id = account_id
        every = environment_targets(cfg, environment, True)  # an account's sweep: its share of them (its clusters)
        mine = [a for a in cfg.environment(environment).accounts if a.account_id == account_id]
        every = account_targets(mine[0], every) if mine else every
        whole = {(t.cluster, t.region) for t in targets} == {(t.cluster, t.region) for t in every}
        self.ownership = ownership.AwsOwnership(
            environment, {t.cluster: t.names for t in targets}, environment_tag_owns=whole
        )
        globals_ = ownership.effective_globals(cfg, environment)
        self.bucket_pattern = cfg.teardown.s3_bucket_pattern
        self.global_roles = list(cfg.teardown.global_iam_roles)
        self.global_users = globals_["iam-user"]
        self.stack_name = (globals_["cloudformation-stack"] or [""])[0]
        self.sweep_global_users = sweep_global_users
        self.wait_timeout = wait_timeout
        self.concurrency = max(1, concurrency or len(self.regions))
        self.sleep = sleep
        self.clock = clock
        self.progress_lines = []
        self._progress_hook = progress
        self.errors = []
        self.warnings = []
        self.kept = []
        self.candidates = []
        self.started = clock()
        # Steps (the action plugin): a wait still running when the budget ends is cut, and the next step resumes
        # from ``resume`` (the plan, the results so far, deletions started and the seconds each wait took).
        self.budget_deadline = None if budget is None else self.started + max(0.0, float(budget))
        self.resume = resume or {}
        self.started_keys = set(self.resume.get("started") or [])
        self.waited = dict(self.resume.get("waited") or {})
        self.pending_state = None
        self._lock = threading.Lock()
        self._others_alive = None
        self.gone = set()  # (region, id) of what this run deleted or found gone: set by leftovers()
        self.watched = {}  # (region, listing key): a wait's last whole listing, for the final pass (take_watched)
        self.policy_tags = {}  # customer managed policy ARN -> its tags as discovery listed them (aws_iam.policies)
        self.final = False

    def remember_watched(self, key, value):
        with self._lock:
            self.watched[key] = value

    def take_watched(self, key):
        with self._lock:  # once: None when nothing was remembered under key
            return self.watched.pop(key, None)

    def progress(self, text):
        """A progress line: kept in the result, and passed to the caller's hook (the benchmark prints them)."""
        with self._lock:
            self.progress_lines.append(f"{self.clock() - self.started:.1f}s {text}")
        if self._progress_hook is not None:
            self._progress_hook(text)

    # --- account-global resources ---------------------------------------------------
    def keep(self, res, why):
        with self._lock:
            if not any(
                k["type"] == res["type"] and k["id"] == res["id"] and k["region"] == res["region"] for k in self.kept
            ):
                self.kept.append(public(res, "kept", why))

    def global_kept_reason(self, kind, name):
        """Why an account-global resource must stay, or "" when this environment alone may delete it."""
        if kind == "iam-user" and not self.sweep_global_users:
            return f"the regions filter leaves out regions of environment {self.environment}"
        others = ownership.aws_account_global(self.cfg, self.environment, kind, name)
        if others:
            return "environment {} in {} also names it".format(", ".join(others), self.cfg.path)
        alive = self.other_clusters_alive()
        if alive:
            return "clusters of other environments still exist: {}".format("; ".join(alive[:5]))
        return ""

    def other_clusters_alive(self):
        """Clusters of the other aws environments of bootstrap.toml that still exist (EKS by exact name, VPCs by
        their ownership tags), computed once."""
        with self._lock:
            if self._others_alive is not None:
                return self._others_alive
            alive = []
            for other in self.cfg.environment_names:
                if other == self.environment or profiles.of(self.cfg.environment(other)).cloud != "aws":
                    continue
                targets = environment_targets(self.cfg, other, True)
                owner = ownership.AwsOwnership(other, {t.cluster: t.names for t in targets})
                for region in _unique(t.region for t in targets):
                    eks_names = {t.eks_name: t.cluster for t in targets if t.eks_name and t.region == region}
                    try:
                        listed = aws.paginate(self.conn.client("eks", region), "list_clusters", "clusters")
                        vpcs = aws.paginate(self.conn.client("ec2", region), "describe_vpcs", "Vpcs")
                    except (ClientError, BotoCoreError, aws.AwsError) as exc:
                        alive.append(
                            f"unknown in {region} ({aws.error_message(exc)}): listing failed, so kept to be safe"
                        )
                        continue
                    alive += [f"EKS cluster {n} of environment {other} in {region}" for n in listed if n in eks_names]
                    alive += [
                        "VPC {} of environment {} in {}".format(v["VpcId"], other, region)
                        for v in vpcs
                        if owner.owner(v.get("Tags") or []) is not None
                    ]
            self._others_alive = alive
            return alive

    # --- discovery -----------------------------------------------------------------
    def _per_region(self, func):
        """func(region) for every region, concurrently; results in region order."""
        if self.concurrency == 1 or len(self.regions) == 1:
            return [func(region) for region in self.regions]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(self.regions))) as pool:
            return list(pool.map(func, self.regions))

    def _discover_region(self, region, with_age=False, confirm=True):
        found = Discovery(self, region, confirm)
        return found.resources(REGION_TYPES, with_age), found

    def _region_failed(self, region, exc):
        self.errors.append(
            {"region": region, "type": "region", "error": f"sweep of {region} stopped: {aws.error_message(exc)}"}
        )

    def _discover_global(self, with_age=False):
        found = Discovery(self, self.home_region)
        return found.resources(GLOBAL_TYPES, with_age), found

    def _collect(self, found):
        for error in found.errors:
            if error not in self.errors:
                self.errors.append(error)
        for item in found.candidates:
            if not any(c["id"] == item["id"] and c["type"] == item["type"] for c in self.candidates):
                self.candidates.append(item)
        for warning in found.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)

    def discover(self, with_age=False):
        """Everything owned: (resources per region in order, global resources). The global
        listing runs beside the regions when concurrency allows."""
        jobs = [lambda r=region: self._discover_region(r, with_age) for region in self.regions]
        jobs.append(lambda: self._discover_global(with_age))
        if self.concurrency == 1:
            done = [job() for job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency + 1, len(jobs))) as pool:
                done = [future.result() for future in [pool.submit(job) for job in jobs]]
        regional = []
        for resources, found in done[:-1]:
            self._collect(found)
            regional.extend(resources)
        global_resources, found = done[-1]
        self._collect(found)
        return regional, global_resources

    # --- modes ---------------------------------------------------------------------
    def plan(self):
        regional, global_resources = self.discover()
        return [
            public(r, "undeletable" if r["type"] == "unsupported" else "planned") for r in regional + global_resources
        ]

    def delete(self):
        """Delete every owned resource. When the step budget ran out during a wait, the results so far (and
        self.pending_state says where the next step goes on)."""
        per_region = self._per_region(self._delete_region)
        results, pending, plan = [], [], {}
        for region, (region_results, region_pending, resources) in zip(self.regions, per_region):
            carried = [r for r in self.resume.get("done", []) if r["region"] == region]
            results.extend(_in_table_order(carried + region_results, REGION_TYPES))
            pending.extend(region_pending)
            plan[region] = resources
        if pending:
            order = {t.name: i for i, t in enumerate(REGION_TYPES)}
            pending.sort(key=lambda p: (self.regions.index(p[0]["region"]), order.get(p[0]["type"], len(order))))
            self.pending_state = {
                "account_id": self.account_id,
                "plan": {region: [_portable(r) for r in items] for region, items in plan.items()},
                "done": results,
                "started": [rows.key(r) for r, dummy in pending],
                "waited": {rows.key(r): round(waited, 3) for r, waited in pending},
                "waiting": [
                    "{} {} {} ({})".format(r["region"], r["type"], r["id"], r.get("state", "?")) for r, dummy in pending
                ],
            }
            return results
        global_resources, found = self._discover_global()
        self._collect(found)
        # IAM roles stay while their cluster's EKS resources are still being deleted: EKS needs them
        blocked = {}
        for item in results:
            if item["outcome"] == "failed" and item["type"] in ("eks-cluster", "eks-nodegroup"):
                blocked.setdefault(item["cluster"], "{} {} in {}".format(item["type"], item["id"], item["region"]))
        kept = [r for r in global_resources if r["type"] == "iam-role" and r["cluster"] in blocked]
        # global resources of one type are independent of each other: deleted side by side
        results.extend(
            Deleter(self, self.home_region, parallel=True).run(
                [r for r in global_resources if r not in kept], GLOBAL_TYPES
            )
        )
        results.extend(
            public(
                r,
                "failed",
                "kept: {} is not deleted yet and may need this role; run the sweep again".format(blocked[r["cluster"]]),
            )
            for r in kept
        )
        return results

    def _delete_region(self, region):
        """(results, [(resource, seconds waited)] still deleting when the step budget ran out, resources)."""
        try:
            planned = self.resume.get("plan", {}).get(region)
            if planned is None:
                planned, found = self._discover_region(region, confirm=False)
                self._collect(found)
            done = {rows.key(r) for r in self.resume.get("done", [])}
            resources = [r for r in planned if rows.key(r) not in done]
            deleter = Deleter(self, region)
            return deleter.run(resources, REGION_TYPES), deleter.pending, planned
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self._region_failed(region, exc)
            return [], [], []

    def leftovers(self, results=()):
        """Everything owned still there after the deletions, listed afresh. ``results`` (this run's outcomes, the
        earlier steps' included) tell the rows what this run saw go: aws_ec2 does not describe those again."""
        # only what this run deleted: an 'absent' answer alone (EC2 is eventually consistent) is described again
        self.gone = {(r["region"], r["id"]) for r in results if r["outcome"] == "deleted"}
        self.final = True
        regional, global_resources = self.discover()
        return [
            public(r, "left", r.get("reason") or "still present after the sweep") for r in regional + global_resources
        ]

    def report(self, min_age_hours, now=None):
        now = now or _now()
        regional, global_resources = self.discover(with_age=True)
        resources = regional + global_resources
        oldest = {}
        for res in resources:
            if res["created"]:
                key = res["cluster"]
                oldest[key] = min(oldest.get(key, res["created"]), res["created"])
        entries = []
        for res in resources:
            created, inherited = res["created"], False
            if not created and res["cluster"] in oldest:
                created, inherited = oldest[res["cluster"]], True
            age = round((now - created).total_seconds() / 3600.0, 1) if created else None
            if age is not None and age < min_age_hours:
                continue
            entry = public(res, "orphan")
            entry.update(created=created.isoformat() if created else None, age_hours=age, age_from_cluster=inherited)
            entries.append(entry)
        return entries


def _portable(res):
    """A planned resource as the next step gets it back (JSON: no datetimes; delete mode needs no creation time)."""
    return dict(res, created=None)


def _in_table_order(results, types):
    order = {t.name: i for i, t in enumerate(types)}
    return sorted(results, key=lambda r: order.get(r["type"], len(order)))


class Deleter:
    """Deletes discovered resources of one region (or the global phase) in table order; the rows' delete and
    wait_state handlers get it (client(), retry_dependency(), discovery(), sweep, region)."""

    def __init__(self, sweep, region, parallel=False):
        self.sweep = sweep
        self.region = region
        self.parallel = parallel
        self.pending = []  # (resource, seconds waited) of waits the step budget cut
        self._lock = threading.Lock()

    def client(self, service, region=None):
        return self.sweep.conn.client(service, region or self.region)

    def discovery(self):
        return Discovery(self.sweep, self.region)

    def watch(self, key, value, region=None):
        """A wait's whole listing, made after every deletion of its row in the region, for the final pass."""
        self.sweep.remember_watched((region or self.region, key), value)

    def run(self, resources, types):
        """Delete resources type by type in table order; regional chains run side by side, then the rows without
        a chain (volumes, the network), unless a chain is still waiting when the step budget runs out."""
        if self.region == GLOBAL:
            return self._run_types(resources, types)
        chains = {}
        for rtype in types:
            if rtype.chain:
                chains.setdefault(rtype.chain, []).append(rtype)
        rest = [t for t in types if not t.chain]
        busy = [c for c in chains.values() if any(r["type"] in {t.name for t in c} for r in resources)]
        if len(busy) > 1:
            with ThreadPoolExecutor(max_workers=len(busy)) as pool:
                done = list(pool.map(lambda c: self._run_types(resources, c), busy))
        else:
            done = [self._run_types(resources, c) for c in busy]
        results = [item for chunk in done for item in chunk]
        if not self.pending:
            results += self._run_types(resources, rest)
        return _in_table_order(results, types)

    def _run_types(self, resources, types):
        results = []
        for rtype in types:
            batch = [r for r in resources if r["type"] == rtype.name]
            if rtype.refresh:
                batch = rtype.refresh(self, batch, resources)
            if not batch:
                continue
            if rtype.before:  # it may also give the order to delete the batch in (security groups)
                batch = rtype.before(self, batch) or batch
            if self.parallel and self.sweep.concurrency > 1 and len(batch) > 1:
                with ThreadPoolExecutor(max_workers=min(self.sweep.concurrency, len(batch))) as pool:
                    outcomes = list(pool.map(lambda r, t=rtype: self._delete_one(t, r), batch))
            else:
                outcomes = [self._delete_one(rtype, res) for res in batch]
            waiting = [res for res, outcome in zip(batch, outcomes) if outcome == "wait"]
            results.extend(o for o in outcomes if o != "wait")
            if waiting:
                self.sweep.progress(
                    "%s: waiting for %d %s deletion(s): %s"
                    % (self.region, len(waiting), rtype.name, ", ".join(r["id"] for r in waiting[:5]))
                )
                finished, cut = self._wait(rtype, waiting)
                results.extend(finished)
                if cut:
                    with self._lock:
                        self.pending.extend(cut)
                    return results  # the rest of this chain depends on what is still deleting
        return results

    def _delete_one(self, rtype, res):
        """'wait' when the deletion must be awaited (only rows with a wait_state), else the public outcome."""
        if rtype.waited and rows.key(res) in self.sweep.started_keys:
            return "wait"  # started in an earlier step
        try:
            answer = rtype.delete(self, res)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            if aws.is_not_found(exc):
                return public(res, "absent", "already gone")
            return public(res, "failed", f"delete failed: {aws.error_message(exc)}")
        if answer == ABSENT:
            return public(res, "absent", "already gone")
        return "wait" if rtype.waited else public(res, "deleted")

    # --- retries and waits -------------------------------------------------------------
    def _delays(self, budget):
        """Sleep between attempts until budget seconds have passed; yields before each new attempt."""
        deadline = self.sweep.clock() + budget
        delay = POLL_FIRST
        while True:
            remaining = deadline - self.sweep.clock()
            if remaining <= 0:
                return
            self.sweep.sleep(min(delay, remaining))
            delay = min(delay * 2, POLL_MAX)
            yield

    def retry_dependency(self, res, func, codes=("DependencyViolation",)):
        """Run func, retrying while AWS says something still depends on the resource."""
        try:
            return func()
        except ClientError as exc:
            if aws.error_code(exc) not in codes:
                raise
            last = exc
        budget = min(self.sweep.wait_timeout, DEPENDENCY_BUDGET)
        for dummy in self._delays(budget):
            try:
                return func()
            except ClientError as exc:
                if aws.error_code(exc) not in codes:
                    raise
                last = exc
        raise aws.AwsError(
            "%s (still after %ds: something outside the sweep may depend on %s %s)"
            % (aws.error_message(last), budget, res["type"], res["id"])
        )

    def _wait(self, rtype, pending):
        """Poll the pending deletions of one row, all of them in one wait_state call per poll, until each is gone,
        has failed or wait_timeout passes; (final results, [(resource, seconds waited)] cut by the step budget).

        A deletion with a typical duration is first polled after FIRST_POLL_SHARE of it, then every POLL_SHARE
        of it (within POLL_FIRST..POLL_MAX); one without is polled with doubling delays."""
        if not rtype.waited:
            raise ValueError(f"sweep row {rtype.name} has no wait_state: its deletions cannot be awaited")
        sweep = self.sweep
        clock, timeout = sweep.clock, sweep.wait_timeout
        start = clock() - max(sweep.waited.get(rows.key(r), 0.0) for r in pending)
        deadline = start + timeout
        expected = rtype.expected * EXPECTED_SCALE
        quiet_until = start + min(expected * FIRST_POLL_SHARE, timeout)
        # the global phase runs to its end within one step (its resources are not in the steps' plan)
        budget = None if rtype.scope == GLOBAL else sweep.budget_deadline
        stop = deadline if budget is None else min(deadline, budget)
        interval = max(POLL_FIRST, min(POLL_MAX, expected * POLL_SHARE)) if expected else POLL_FIRST
        results, states, remaining = [], {}, list(pending)
        polls = 0
        while remaining:
            now = clock()
            if now < quiet_until:
                if now >= stop:
                    break
                sweep.sleep(min(quiet_until, stop) - now)
                continue
            try:
                found = rtype.wait_state(self, list(remaining))
            except (ClientError, BotoCoreError, aws.AwsError) as exc:
                found = {r["id"]: f"unknown ({aws.error_message(exc)})" for r in remaining}
            polls += 1
            for res in list(remaining):
                # by id, or by region|type|id where one id is in several regions (the clusterawsadm stack)
                state = found.get(rows.key(res), found.get(res["id"], "?"))
                states[rows.key(res)] = state
                if state == "gone":
                    remaining.remove(res)
                    results.append(public(res, "deleted"))
                elif state in ("DELETE_FAILED", "FAILED", "failed"):
                    remaining.remove(res)
                    results.append(public(res, "failed", f"deletion failed: status {state}"))
            if not remaining:
                break
            if polls > 1:
                sweep.progress(
                    "{}: still deleting {}".format(
                        self.region,
                        ", ".join(
                            "{} {} ({})".format(rtype.name, r["id"], states.get(rows.key(r), "?"))
                            for r in remaining[:5]
                        ),
                    )
                )
            now = clock()
            if now >= stop:
                break
            sweep.sleep(min(interval, stop - now))
            if not expected:
                interval = min(interval * 2, POLL_MAX)
        cut = []
        if remaining and clock() < deadline and budget is not None:  # the step budget ran out: the next step goes on
            waited = clock() - start
            cut = [(dict(r, state=states.get(rows.key(r), "deleting")), waited) for r in remaining]
        else:
            results.extend(
                public(
                    res, "failed", "still %s after %ds (wait_timeout)" % (states.get(rows.key(res), "present"), timeout)
                )
                for res in remaining
            )
        order = {r["id"]: i for i, r in enumerate(pending)}
        results.sort(key=lambda r: order[r["id"]])
        return results, cut


# The one table of the sweep: its order is the deletion order (within a chain, and for the rows without a chain
# after every chain). A row is defined in its service's file (aws_rows.ResourceType); adding a type is one row
# there and its place here.
REGION_TYPES = (
    aws_eks.NODEGROUP_ROW,
    aws_eks.POD_IDENTITY_ROW,
    aws_eks.CLUSTER_ROW,
    aws_logs.LOG_GROUP_ROW,
    aws_ec2.INSTANCE_ROW,
    aws_ec2.LAUNCH_TEMPLATE_ROW,
    aws_ec2.VOLUME_ROW,
    aws_ec2.SNAPSHOT_ROW,
    aws_rds.INSTANCE_ROW,
    aws_rds.SUBNET_GROUP_ROW,
    aws_elb.ELBV2_ROW,
    aws_elb.CLASSIC_ROW,
    aws_elb.TARGET_GROUP_ROW,
    aws_ec2.NAT_ROW,
    aws_ec2.EIP_ROW,
    aws_ec2.ENI_ROW,
    aws_ec2.SUBNET_ROW,
    aws_ec2.IGW_ROW,
    aws_ec2.RTB_ROW,
    aws_ec2.SG_ROW,
    aws_ec2.VPC_ROW,
    aws_tagging.UNSUPPORTED,
)

GLOBAL_TYPES = (
    aws_s3.BUCKET_ROW,
    aws_iam.ROLE_ROW,
    aws_iam.OIDC_ROW,
    aws_iam.USER_ROW,
    aws_iam.POLICY_ROW,
    aws_cloudformation.STACK_ROW,
)

REGION_ORDER = tuple(t.name for t in REGION_TYPES)
GLOBAL_ORDER = tuple(t.name for t in GLOBAL_TYPES)


# --- entry point -----------------------------------------------------------------------


def run(params, check_mode=False, config_loader=None, sleep=time.sleep, progress=None):
    """Run the sweep described by the module parameters; the module's result dict.

    With ``[[environments.<env>.accounts]]`` in bootstrap.toml each account is swept through its own role
    (run_accounts); without, the one account of the caller's credentials.

    Raises SweepError, config.ConfigError or aws.AwsError when it cannot start.
    """
    started = time.monotonic()
    loader = config_loader or config_mod.load
    cfg = loader(path=params.get("config_file"), environment=params.get("environment"))
    environment = params.get("environment") or cfg.selected
    mode = params.get("mode") or "delete"
    targets, all_regions = targets_from_config(
        cfg, environment, params.get("include_management", True), params.get("regions")
    )
    wait_timeout, resume = _checked_options(params, mode, check_mode)
    conn = aws.Connection(
        profile=params.get("profile"),
        endpoint_url=params.get("endpoint_url"),
        access_key=params.get("access_key"),
        secret_key=params.get("secret_key"),
        session_token=params.get("session_token"),
    )
    regions = _unique(t.region for t in targets)
    job = dict(
        cfg=cfg,
        environment=environment,
        mode=mode,
        check_mode=check_mode,
        params=params,
        wait_timeout=wait_timeout,
        sleep=sleep,
        progress=progress,
    )
    accounts = cfg.environment(environment).accounts
    if accounts:
        return run_accounts(conn, accounts, targets, all_regions, started, resume, **job)
    if params.get("account_id") and resume is None:  # before any listing or deletion (contract.caller_account)
        contract.caller_account("aws_orphan_sweep", params["account_id"], conn.account_id(regions[0]))
    account_id = params.get("account_id") or (resume or {}).get("account_id") or conn.account_id(regions[0])
    result = sweep_account(
        conn,
        account_id,
        targets,
        set(regions) >= set(all_regions),
        budget=params.get("_wait_budget"),
        resume=resume,
        **job,
    )
    result["api_calls"] = conn.counter.total
    result["api_calls_by_operation"] = dict(sorted(conn.counter.by_operation.items()))
    result["duration"] = round(time.monotonic() - started, 3)
    if mode == "report" and params.get("report_path") and not check_mode:
        result["report_files"] = aws_report.write_report(
            params["report_path"], result["report"]["markdown"], result["report"]["json"]
        )
    return result


def _checked_options(params, mode, check_mode):
    """(wait_timeout, resume state) of the module parameters; SweepError naming an option no sweep can start with."""
    if (params.get("min_age_hours") or 0) < 0:
        raise SweepError("min_age_hours must be >= 0 (got {})".format(params["min_age_hours"]))
    wait_timeout = 1200 if params.get("wait_timeout") is None else params["wait_timeout"]
    if wait_timeout < 0 or (params.get("concurrency") is not None and params["concurrency"] < 1):
        raise SweepError(
            "wait_timeout must be >= 0 and concurrency >= 1 (got {} and {})".format(
                wait_timeout, params.get("concurrency")
            )
        )
    resume = params.get("_sweep_state") or None
    if resume is not None and (not isinstance(resume, dict) or mode != "delete" or check_mode):
        raise SweepError("_sweep_state is internal to the action plugin's steps (delete mode only); do not set it")
    return wait_timeout, resume


def sweep_account(
    conn,
    account_id,
    targets,
    covers_all,
    cfg,
    environment,
    mode,
    check_mode,
    params,
    wait_timeout,
    sleep,
    progress,
    budget=None,
    resume=None,
):
    """Sweep (delete, plan or report) one account through ``conn``, whose account is ``account_id`` (checked by
    the caller); the module's result for that account (msg and failed included, no report files written)."""
    regions = _unique(t.region for t in targets)
    sweep = Sweep(
        conn,
        targets,
        cfg,
        environment,
        account_id,
        wait_timeout=wait_timeout,
        concurrency=params.get("concurrency"),
        sweep_global_users=covers_all,
        sleep=sleep,
        progress=progress,
        budget=budget,
        resume=resume,
    )
    result = {
        "changed": False,
        "environment": environment,
        "account_id": account_id,
        "regions": regions,
        "targets": [t.as_dict() for t in targets],
        "wait_timeout": wait_timeout,
        "results": [],
        "plan": [],
        "leftovers": [],
        "errors": [],
        "warnings": [],
    }

    if mode == "report":
        min_age = params.get("min_age_hours")
        min_age = 6 if min_age is None else min_age
        entries = sweep.report(min_age)
        data = {
            "environment": environment,
            "account_id": account_id,
            "regions": regions,
            "generated_at": _now().replace(microsecond=0).isoformat(),
            "min_age_hours": min_age,
            "count": len(entries),
            "resources": entries,
            "errors": list(sweep.errors),
            "candidates": [public(c, "candidate") for c in sweep.candidates],
            "kept": list(sweep.kept),
        }
        result["report"] = {"markdown": aws_report.render_markdown(data), "json": data}
    elif check_mode:
        result["plan"] = sweep.plan()
        result["changed"] = bool(result["plan"])
    else:
        result["results"] = sweep.delete()
        result["changed"] = any(r["outcome"] == "deleted" for r in result["results"])
        if sweep.pending_state is None:
            result["leftovers"] = sweep.leftovers(result["results"])
        else:  # the step budget ran out during a wait: the action plugin runs the next step
            result["_krops_pending"] = True
            result["_krops_state"] = sweep.pending_state
            result["waiting"] = sweep.pending_state["waiting"]

    result["errors"] = sweep.errors
    result["warnings"] = sweep.warnings
    result["kept"] = sweep.kept
    result["progress"] = sweep.progress_lines
    result["candidates"] = [public(c, "candidate") for c in sweep.candidates]
    result["msg"] = aws_report.summary(result, mode, check_mode)
    if result.get("_krops_pending"):
        result["msg"] = "sweep in progress, still deleting: {}".format(", ".join(result["waiting"][:10]))
    # rc=0 means nothing owned is left: the final pass decides (a stack still deleting is listed there too), so a
    # failed step whose resource went anyway (an automated RDS snapshot going with its instance) is not a failure
    result["failed"] = bool(result["leftovers"] or result["errors"])
    return result


# --- several accounts ------------------------------------------------------------------


def session_name(account, environment):
    r"""The RoleSessionName: the account's session-name, else krops-<environment>-sweep (2-64 of [\w+=,.@-])."""
    return account.session_name or ("krops-%s-sweep" % environment)[:64]


def assume_role(base, account, environment, region):
    """(a new Connection in ``account`` (a bootstrap.toml [[accounts]] table), the account its credentials belong to):
    STS AssumeRole of its role with the base credentials. The connection's session and clients are its own, never
    shared with another account; the API calls are counted with the base connection's.

    The account is read from the answer's AssumedRoleUser ARN, which STS documents as the ARN of the temporary
    credentials it returns (arn:<partition>:sts::<account>:assumed-role/<role>/<session>): that is the one identity
    proof per account, so no GetCallerIdentity follows (docs/upstream-facts.md, "STS AssumeRole")."""
    args = dict(RoleArn=account.role_arn, RoleSessionName=session_name(account, environment))
    if account.external_id:
        args["ExternalId"] = account.external_id
    if account.duration:
        args["DurationSeconds"] = account.duration
    try:
        answer = aws.call(base.client("sts", region), "assume_role", **args)
        found = answer["Credentials"]
        identity = (answer.get("AssumedRoleUser") or {}).get("Arn") or ""
    except (ClientError, BotoCoreError, KeyError, TypeError) as exc:
        raise aws.AwsError(
            f"account {account.account_id}: cannot assume role {account.role_arn} (sts assume-role in {region}): "
            f"{aws.error_message(exc)}; check that the role exists, that its trust policy lets the caller assume it "
            "(and the external-id, when it asks for one) and that the caller may call sts:AssumeRole"
        )
    parts = str(identity).split(":", 5)
    if len(parts) < 6 or parts[2] != "sts" or not parts[5].startswith("assumed-role/"):
        raise aws.AwsError(
            f"account {account.account_id}: sts assume-role of {account.role_arn} in {region} answered AssumedRoleUser "
            f"{identity!r}, not an assumed-role ARN, so the account of its credentials is unknown; check the endpoint "
            "(endpoint_url, AWS_ENDPOINT_URL)"
        )
    session = aws.Connection(
        endpoint_url=base.endpoint_url,
        access_key=found["AccessKeyId"],
        secret_key=found["SecretAccessKey"],
        session_token=found["SessionToken"],
        counter=base.counter,
    )
    return session, parts[4]


def account_targets(account, targets):
    """The targets swept in an account: its clusters (every cluster when it names none) in its regions (every
    region when it names none)."""
    regions, clusters = account.regions, account.clusters
    return [t for t in targets if (not regions or t.region in regions) and (not clusters or t.cluster in clusters)]


# Accounts swept at the same time when the concurrency option does not say: each account has its own session,
# clients and AWS request-rate budget, so the bound is only there to keep the threads (accounts x regions x
# chains) and sockets of one process in check.
ACCOUNTS_AT_ONCE = 8


def _in_order(func, items, workers):
    """[func(item) for item in items], up to ``workers`` at a time; results in the order of items."""
    if workers <= 1 or len(items) <= 1:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))


def run_accounts(conn, accounts, targets, all_regions, started, resume, **job):
    """Sweep every configured account (or the one account_id names), each through its own role, up to
    ``concurrency`` (default ACCOUNTS_AT_ONCE) accounts at a time, and group the result by account in the order of
    bootstrap.toml.

    Phase 1, for every account: its role is assumed and the account of the credentials read from STS's answer
    (assume_role). Only when every account has been through phase 1 does phase 2 list or delete anything: a role
    whose credentials belong to another account than its account-id refuses the whole run, before anything is
    listed or deleted in any account. An account whose role cannot be assumed, or whose sweep stops, is an error of
    that account (nothing is listed or deleted there); the others are swept with their own ownership proof, each
    with its own connection (session and clients). Several accounts run in one step (no resume)."""
    params, environment = job["params"], job["environment"]
    if resume is not None:
        raise SweepError("_sweep_state is internal to the action plugin's steps; a sweep of several accounts has none")
    configured = [a.account_id for a in accounts]
    wanted = params.get("account_id")
    if wanted:
        if wanted not in configured:
            raise SweepError(
                "account_id {} is not an account of environment {} (its accounts: {}); name one of them, or leave "
                "account_id out to sweep them all".format(wanted, environment, ", ".join(configured))
            )
        accounts = [a for a in accounts if a.account_id == wanted]
    workers = params.get("concurrency") or ACCOUNTS_AT_ONCE

    def prove(account):
        """(account, its targets, its connection or None, the account its credentials belong to, the error)"""
        mine = account_targets(account, targets)
        if not mine:
            return account, mine, None, None, None
        try:
            session, actual = assume_role(conn, account, environment, mine[0].region)
        except aws.AwsError as exc:
            text = str(exc)
            if not text.startswith("account "):
                text = f"account {account.account_id}: {text}"
            return account, mine, None, None, text
        return account, mine, session, actual, None

    # phase 1: every role assumed and every identity read before any listing (in the order of bootstrap.toml, so
    # the first mismatch named is always the same one)
    plans = _in_order(prove, accounts, workers)
    for account, dummy, session, actual, dummy in plans:
        if session is not None and actual != account.account_id:
            raise SweepError(
                f"account {account.account_id} (role {account.role_arn}): the assumed role's credentials belong to "
                f"account {actual} (the AssumedRoleUser ARN of sts assume-role), not {account.account_id}; nothing was "
                f"listed or deleted in any account; fix role-arn or account-id of that "
                f"[[environments.{environment}.accounts]] table"
            )
    hook = job["progress"]

    def sweep_one(plan):
        account, mine, session, dummy, failure = plan
        account_id = account.account_id
        if not mine:
            entry = _empty_account(account, environment, job["mode"])
            entry["warnings"].append(f"account {account_id}: no target of the sweep is in its regions; skipped")
        elif session is None:
            entry = _empty_account(account, environment, job["mode"])
            entry["errors"].append({"region": "", "type": "account", "error": failure})
        else:
            swept = _unique(t.region for t in mine)
            every = account_targets(account, environment_targets(job["cfg"], environment, True))
            covers = set(swept) >= {t.region for t in every}
            mine_job = dict(job, progress=None if hook is None else lambda text: hook(f"account {account_id}: {text}"))
            try:
                entry = sweep_account(session, account_id, mine, covers, **mine_job)
            except (ClientError, BotoCoreError, aws.AwsError) as exc:
                entry = _empty_account(account, environment, job["mode"])
                entry["errors"].append(
                    {
                        "region": "",
                        "type": "account",
                        "error": f"account {account_id}: sweep stopped: {aws.error_message(exc)}",
                    }
                )
        entry["role_arn"] = account.role_arn
        entry["failed"] = bool(entry["leftovers"] or entry["errors"])
        if entry["msg"] == NOTHING_SWEPT and entry["errors"]:
            prefix = f"account {account_id}: "
            entry["msg"] = "not swept (nothing listed or deleted there): {}".format(
                "; ".join(
                    e["error"][len(prefix) :] if e["error"].startswith(prefix) else e["error"] for e in entry["errors"]
                )
            )
        entry["msg"] = f"account {account_id}: {entry['msg']}"
        return entry

    # phase 2: each account with its own connection and ownership proof, several at a time
    parts = _in_order(sweep_one, plans, workers)
    return _merge_accounts(parts, conn, targets, started, job)


NOTHING_SWEPT = "nothing swept"


def _empty_account(account, environment, mode):
    entry = {
        "changed": False,
        "environment": environment,
        "account_id": account.account_id,
        "regions": list(account.regions),
        "targets": [],
        "results": [],
        "plan": [],
        "leftovers": [],
        "errors": [],
        "warnings": [],
        "kept": [],
        "candidates": [],
        "progress": [],
        "msg": NOTHING_SWEPT,
    }
    if mode == "report":
        entry["report"] = {"markdown": "", "json": {"count": 0, "resources": [], "errors": entry["errors"]}}
    return entry


LISTS = ("results", "plan", "leftovers", "errors", "warnings", "kept", "candidates")


def _merge_accounts(parts, conn, targets, started, job):
    """One result of several accounts: per account under ``accounts``; the lists also flat, each entry with its
    account_id; failed when anything owned is left, or anything failed, in any account."""
    mode, environment = job["mode"], job["environment"]
    result = {
        "changed": any(p["changed"] for p in parts),
        "environment": environment,
        "account_id": "",
        "account_ids": [p["account_id"] for p in parts],
        "regions": _unique(r for p in parts for r in p["regions"]),
        "targets": [dict(t, account_id=p["account_id"]) for p in parts for t in p["targets"]],
        "wait_timeout": job["wait_timeout"],
        "accounts": [],
    }
    for key in LISTS:
        if key == "warnings":
            result[key] = [w for p in parts for w in p[key]]
        else:
            result[key] = [dict(item, account_id=p["account_id"]) for p in parts for item in p[key]]
    result["progress"] = [f"{p['account_id']} {line}" for p in parts for line in p["progress"]]
    for part in parts:
        summary_entry = {key: part[key] for key in ("account_id", "role_arn", "regions", "failed", "msg") + LISTS}
        summary_entry["changed"] = part["changed"]
        result["accounts"].append(summary_entry)
    if mode == "report":
        aws_report.accounts_report(parts, result, job, _now().replace(microsecond=0).isoformat())
    result["api_calls"] = conn.counter.total
    result["api_calls_by_operation"] = dict(sorted(conn.counter.by_operation.items()))
    result["duration"] = round(time.monotonic() - started, 3)
    result["msg"] = "; ".join(p["msg"] for p in parts)
    result["failed"] = any(p["failed"] for p in parts)
    return result
