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
aws_rds, aws_iam, aws_s3, aws_cloudformation, aws_logs, aws_tagging; each a steps.Row made by
aws_delete.sweep_row); its order is the deletion order. The deletions run on the steps engine (steps.Run: one
run per region, the regions side by side, then one for the global phase), which owns the order, the chains,
the waits, the step budget and its resume state. Per region the chains run side by side: EKS node groups
(waited), pod identity associations, clusters (waited); self-managed instances (waited); RDS instances
(waited) and their subnet groups; load balancers and target groups; NAT gateways (waited) and elastic IPs.
Then launch templates, EBS volumes and snapshots, and the network: detached interfaces, subnets, internet
gateways, route tables, security groups, VPCs. Then the global phase: S3 buckets, IAM roles, OIDC
providers, users, customer managed policies, the clusterawsadm stack (waited). Finally every region is
listed again: anything owned that is left is a leftover (EC2 ids this run saw go are not described again:
they are never reused): this final pass is the sweep's own (``leftovers``), not the engine's. With a step
budget (the action plugin) a wait still running when it ends is cut and the next step resumes each cut
region's run from its state without listing again.

Report mode lists the same candidates read-only and keeps those older than N hours.
"""

from __future__ import annotations

import datetime
import threading
import time

from ansible_collections.krops.platform.plugins.module_utils import (
    aws,
    aws_accounts,
    aws_cloudformation,
    aws_delete,
    aws_ec2,
    aws_eks,
    aws_logs,
    aws_elb,
    aws_iam,
    aws_rds,
    aws_report,
    aws_s3,
    aws_tagging,
    aws_targets,
)
from ansible_collections.krops.platform.plugins.module_utils import aws_rows as rows
from ansible_collections.krops.platform.plugins.module_utils import config as config_mod
from ansible_collections.krops.platform.plugins.module_utils import contract
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import steps
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError


def _now():
    return datetime.datetime.now(datetime.UTC)


class Discovery:
    """Read-only listing of everything the targets own in one region (or globally): the rows' list handlers read
    it. Listings several rows share (EC2 tags, the Tagging API, EKS clusters, RDS) are made once (cached())."""

    def __init__(self, sweep, region, confirm=True, with_age=False):
        self.sweep = sweep
        self.region = region
        self.with_age = with_age  # the report's listing: each resource's creation time
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

    def resources(self, types):
        """Every owned resource of the types, one listing per row, in table order."""
        return [res for row in types for res in row.discover(self)]


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
        self.regions = rows.unique(t.region for t in targets)
        self.home_region = self.regions[0]
        self.account_id = account_id
        # an account's sweep: its share of them (its clusters)
        every = aws_targets.environment_targets(cfg, environment, True)
        mine = [a for a in cfg.environment(environment).accounts if a.account_id == account_id]
        every = aws_targets.account_targets(mine[0], every) if mine else every
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
        # from ``resume``: each cut region's steps.Run state, the results of the regions that ended.
        self.budget = budget
        self.resume = resume or {}
        self.pending_state = None
        self._lock = threading.Lock()
        self._others_alive = None
        self.gone = set()  # (region, id) of what this run deleted or found gone: set by leftovers()
        self.watched = {}  # (region, listing key): a wait's last whole listing, for the final pass (take_watched)
        self.handled_arns = HANDLED_ARNS
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
                self.kept.append(rows.public(res, "kept", why))

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
                targets = aws_targets.environment_targets(self.cfg, other, True)
                owner = ownership.AwsOwnership(other, {t.cluster: t.names for t in targets})
                for region in rows.unique(t.region for t in targets):
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
    def discovery(self, region, confirm=True, with_age=False):
        """A fresh listing of one region (the rows' deletions read it too)."""
        return Discovery(self, region, confirm, with_age)

    def _discover_region(self, region, with_age=False):
        found = self.discovery(region, with_age=with_age)
        return found.resources(REGION_TYPES), found

    def _region_failed(self, region, exc):
        self.errors.append(
            {"region": region, "type": "region", "error": f"sweep of {region} stopped: {aws.error_message(exc)}"}
        )

    def _discover_global(self, with_age=False):
        found = self.discovery(self.home_region, with_age=with_age)
        return found.resources(GLOBAL_TYPES), found

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
        done = steps.side_by_side(lambda job: job(), jobs, 1 if self.concurrency == 1 else self.concurrency + 1)
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
            rows.public(r, "undeletable" if r["type"] == "unsupported" else "planned")
            for r in regional + global_resources
        ]

    def delete(self):
        """Delete every owned resource: each region's rows on the steps engine (regions side by side), then the
        global rows. When the step budget ran out during a wait, the results so far (and self.pending_state says
        where the next step goes on)."""
        per_region = steps.side_by_side(self._delete_region, self.regions, self.concurrency)
        results = [r for region_results, dummy in per_region for r in region_results]
        cut = {region: state for region, (dummy, state) in zip(self.regions, per_region) if state}
        if cut:
            self.pending_state = self._pending(per_region, cut)
            return results
        # IAM roles stay while their cluster's EKS resources are still being deleted: EKS needs them
        blocked = {}
        for item in results:
            if item["outcome"] == "failed" and item["type"] in ("eks-cluster", "eks-nodegroup"):
                blocked.setdefault(item["cluster"], "{} {} in {}".format(item["type"], item["id"], item["region"]))
        kept = []

        def settle(found, plan):
            kept.extend(r for r in plan["iam-role"] if r["cluster"] in blocked)
            plan["iam-role"] = [r for r in plan["iam-role"] if r["cluster"] not in blocked]

        # global resources of one type are independent of each other: deleted side by side (workers); this phase
        # runs to its end within one step (no budget: its resources are not in the steps' state)
        home = self.home_region
        done = self._run(home, GLOBAL_TYPES, lambda: self.discovery(home), settle=settle, workers=self.concurrency)
        results += done["results"]
        why = "kept: {} is not deleted yet and may need this role; run the sweep again"
        return results + [rows.public(r, "failed", why.format(blocked[r["cluster"]])) for r in kept]

    def _delete_region(self, region):
        """(results, the steps.Run state to resume from when the step budget cut a wait there, else None)."""
        if region in self.resume.get("done", {}):
            return self.resume["done"][region], None
        state = self.resume.get("regions", {}).get(region)
        try:
            # the delete-mode listing: ids only where a delete answers for a gone one itself (aws_ec2, aws_elb)
            result = self._run(region, REGION_TYPES, lambda: self.discovery(region, confirm=False), resume=state)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self._region_failed(region, exc)
            return [], None
        return result["results"], result.get("resume")

    def _run(self, region, types, scan, resume=None, settle=None, workers=1):
        """The result of the steps.Run of ``types`` in ``region`` (listed by ``scan``); the global phase has no budget:
        it runs to its end."""
        result = steps.Run(
            types,
            aws_delete.Context(self, region),
            scan,
            settle=settle,
            facts=lambda found: self._collect(found) or {},
            public=aws_delete.public,
            label=rows.key,
            resume=resume,
            budget=self.budget if types is REGION_TYPES else None,
            timeout=self.wait_timeout,
            sleep=self.sleep,
            clock=self.clock,
            stop=False,
            verify=False,  # the final pass lists every region and the global phase once (leftovers)
            workers=workers,
            progress=lambda text: self.progress(f"{region}: {text}"),
        ).execute()
        for entry in result["results"]:  # a deletion that failed while it was followed: its reason says why
            if "error" in entry:
                entry["reason"] = entry.pop("error")
        return result

    def _pending(self, per_region, cut):
        """The state the next step goes on from: each cut region's steps.Run state, the results of the others, and
        what is still deleting (``waiting``)."""
        order = {t.name: i for i, t in enumerate(REGION_TYPES)}
        pending = [p for region in self.regions if region in cut for p in cut[region]["pending"]]
        pending.sort(key=lambda p: (self.regions.index(p[2]["region"]), order.get(p[0], len(order))))
        return {
            "account_id": self.account_id,
            "regions": cut,
            "done": {region: results for region, (results, state) in zip(self.regions, per_region) if not state},
            "waiting": [
                "{} {} {} ({})".format(h["region"], h["type"], h["id"], h.get("state", "deleting"))
                for dummy, dummy2, h, dummy3 in pending
            ],
        }

    def leftovers(self, results=()):
        """Everything owned still there after the deletions, listed afresh. ``results`` (this run's outcomes, the
        earlier steps' included) tell the rows what this run saw go: aws_ec2 does not describe those again."""
        # only what this run deleted: an 'absent' answer alone (EC2 is eventually consistent) is described again
        self.gone = {(r["region"], r["id"]) for r in results if r["outcome"] == "deleted"}
        self.final = True
        regional, global_resources = self.discover()
        return [
            rows.public(r, "left", r.get("reason") or "still present after the sweep")
            for r in regional + global_resources
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
            entry = rows.public(res, "orphan")
            entry.update(created=created.isoformat() if created else None, age_hours=age, age_from_cluster=inherited)
            entries.append(entry)
        return entries


# The one table of the sweep: its order is the deletion order (within a chain, and for the rows without a chain
# after every chain). A row is defined in its service's file (aws_delete.sweep_row, a steps.Row); adding a type
# is one row there and its place here.
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
# the Tagging API's ARN types a row handles (its ``arn``): an owned ARN of any other type is unsupported (aws_tagging)
HANDLED_ARNS = frozenset(arn for row in REGION_TYPES + GLOBAL_TYPES for arn in row.arns)


# --- entry point -----------------------------------------------------------------------


def run(params, check_mode=False, config_loader=None, sleep=time.sleep, progress=None):
    """Run the sweep described by the module parameters; the module's result dict.

    With ``[[environments.<env>.accounts]]`` in bootstrap.toml each account is swept through its own role
    (aws_accounts.run_accounts); without, the one account of the caller's credentials.

    Raises aws_targets.SweepError, config.ConfigError or aws.AwsError when it cannot start.
    """
    started = time.monotonic()
    loader = config_loader or config_mod.load
    cfg = loader(path=params.get("config_file"), environment=params.get("environment"))
    environment = params.get("environment") or cfg.selected
    mode = params.get("mode") or "delete"
    targets, all_regions = aws_targets.targets_from_config(
        cfg, environment, params.get("include_management", True), params.get("regions")
    )
    wait_timeout, resume = _checked_options(params, mode, check_mode)
    conn = aws.Connection.from_options(params)
    regions = rows.unique(t.region for t in targets)
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
        return aws_accounts.run_accounts(conn, accounts, targets, all_regions, started, resume, sweep_account, **job)
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
    """(wait_timeout, resume state) of the module parameters; aws_targets.SweepError naming an option no sweep can start with."""
    if (params.get("min_age_hours") or 0) < 0:
        raise aws_targets.SweepError("min_age_hours must be >= 0 (got {})".format(params["min_age_hours"]))
    wait_timeout = 1200 if params.get("wait_timeout") is None else params["wait_timeout"]
    if wait_timeout < 0 or (params.get("concurrency") is not None and params["concurrency"] < 1):
        raise aws_targets.SweepError(
            "wait_timeout must be >= 0 and concurrency >= 1 (got {} and {})".format(
                wait_timeout, params.get("concurrency")
            )
        )
    resume = params.get("_resume") or None  # the steps engine's resume state (steps.STEP_STATE)
    if resume is not None and (not isinstance(resume, dict) or mode != "delete" or check_mode):
        raise aws_targets.SweepError("_resume is internal to the action plugin's steps (delete mode only); do not set it")
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
    regions = rows.unique(t.region for t in targets)
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
            "generated_at": aws_report.generated_at(),
            "min_age_hours": min_age,
            "count": len(entries),
            "resources": entries,
            "errors": list(sweep.errors),
            "candidates": [rows.public(c, "candidate") for c in sweep.candidates],
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
            result[steps.PENDING_KEY] = True
            result[steps.RESUME_KEY] = sweep.pending_state
            result["waiting"] = sweep.pending_state["waiting"]

    result["errors"] = sweep.errors
    result["warnings"] = sweep.warnings
    result["kept"] = sweep.kept
    result["progress"] = sweep.progress_lines
    result["candidates"] = [rows.public(c, "candidate") for c in sweep.candidates]
    result["msg"] = aws_report.summary(result, mode, check_mode)
    if result.get(steps.PENDING_KEY):
        result["msg"] = "sweep in progress, still deleting: {}".format(", ".join(result["waiting"][:10]))
    # rc=0 means nothing owned is left: the final pass decides (a stack still deleting is listed there too), so a
    # failed step whose resource went anyway (an automated RDS snapshot going with its instance) is not a failure
    result["failed"] = bool(result["leftovers"] or result["errors"])
    return result
