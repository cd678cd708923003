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

The type table (REGION_TYPES, GLOBAL_TYPES) is made of the rows each service lists in its ROWS (aws_eks, aws_logs,
aws_ec2, aws_rds, aws_elb, aws_vpc, aws_tagging, aws_s3, aws_iam, aws_cloudformation, the registry SERVICES; each row a
steps.Row made by aws_delete.sweep_row), in the registry's order, each row after the rows it names in ``after``;
its order is the deletion order. Every mode runs on the steps engine (steps.Run: one run per region, the regions
side by side, then one for the global phase), and each row's one discovery serves them all (through an
aws_delete.Scan of the mode): delete mode (the engine owns the order, the chains, the waits, the step budget and its
resume state), check mode (the engine's plan), report mode (cloud_report.orphans, with each resource's age) and the
final pass (the engine's verification). Per region the chains run side by side:
EKS node groups (waited), pod identity associations, clusters (waited); self-managed instances (waited); RDS
instances (waited) and their subnet groups; load balancers and target groups; NAT gateways (waited) and
elastic IPs. Then launch templates, EBS volumes and snapshots, and the network: detached interfaces,
subnets, internet gateways, route tables, security groups, VPCs. Then the global phase: S3 buckets, IAM
roles, OIDC providers, users, customer managed policies, the clusterawsadm stack (waited). Finally, once
every deletion ended, each run's verification discovers again: anything owned it finds is a leftover, and
only that (EC2 ids this run saw go are not described again: they are never reused). With a step budget
(the action plugin) a wait still running when it ends is cut and the next step resumes each cut region's
run from its state without listing again.

Report mode lists the same resources read-only and keeps those older than N hours.
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
    aws_vpc,
    cloud_report,
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
        # from ``resume``: each cut region's steps.Run state, the final states of the regions that ended.
        self.budget = budget
        self.resume = resume or {}
        self.pending_state = None
        self._lock = threading.Lock()
        self._others_alive = None
        self.scans = {}  # (final pass, the run's order) -> its scans (collect)
        self.left = []  # what the final pass found: the leftovers
        self.watched = {}  # (region, listing key): a wait's last whole listing, for the final pass (take_watched)
        self.handled_arns = HANDLED_ARNS
        self.policy_tags = {}  # customer managed policy ARN -> its tags as discovery listed them (aws_iam.policies)

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

    # --- the runs: one steps.Run per region and one for the global phase, in every mode -----------------------------
    def _scan(self, region, mode, order, run=None):
        """A fresh discovery of ``region`` (the engine's scan) in ``mode``: "delete" (ids only where a delete answers
        for a gone one itself), "plan", "report" (with each resource's creation time) or "verify" (the final pass: the
        EC2 ids this run deleted are not described again; an 'absent' answer alone is, EC2 being eventually
        consistent). Kept under ``order`` (the run's place, then the pass) for its errors, warnings and candidates."""
        results = (run.result.get("results") or ()) if run is not None else ()
        gone = {(r["region"], r["id"]) for r in results if r["outcome"] == "deleted"}
        scan = aws_delete.Scan(self, region, mode != "delete", mode == "report", mode == "verify", gone)
        with self._lock:
            self.scans.setdefault((mode == "verify", order), []).append(scan)
        return scan

    def _run(self, order, mode, resume=None, settle=None):
        """The steps.Run of run ``order``: the regions' (REGION_TYPES) in their order, then the global phase's
        (GLOBAL_TYPES, its resources of one type side by side). Its final pass is the engine's verification, which
        the sweep runs once every run ended (verification()): only what it finds is left."""
        regional = order < len(self.regions)
        region = self.regions[order] if regional else self.home_region
        run = steps.Run(
            REGION_TYPES if regional else GLOBAL_TYPES,
            aws_delete.Context(self, region),
            lambda: self._scan(region, mode, order),
            rescan=lambda: self._scan(region, "verify", order, run),
            check_mode=mode != "delete",
            settle=settle,
            public=aws_delete.public,
            label=rows.key,
            resume=resume,
            budget=self.budget if regional else None,  # the global phase runs to its end within one step
            timeout=self.wait_timeout,
            sleep=self.sleep,
            clock=self.clock,
            stop=False,
            verify=False,
            decides=True,
            workers=1 if regional else self.concurrency,
            progress=lambda text: self.progress(f"{region}: {text}"),
        )
        return run

    def _runs(self, mode):
        """Every run of a read-only mode, executed: the regions and the global phase side by side."""
        runs = [self._run(order, mode) for order in range(len(self.regions) + 1)]
        steps.execute_each(runs, 1 if self.concurrency == 1 else self.concurrency + 1)
        return runs

    def collect(self):
        """The errors, candidates and warnings of every scan: the runs' in their order, then their final passes'."""
        for key in sorted(self.scans):
            for found in self.scans[key]:
                self.errors += [e for e in found.errors if e not in self.errors]
                known = {(c["type"], c["id"]) for c in self.candidates}
                self.candidates += [c for c in found.candidates if (c["type"], c["id"]) not in known]
                self.warnings += [w for w in found.warnings if w not in self.warnings]

    def _region_failed(self, region, exc):
        self.errors.append(
            {"region": region, "type": "region", "error": f"sweep of {region} stopped: {aws.error_message(exc)}"}
        )

    # --- modes ---------------------------------------------------------------------
    def plan(self):
        """Check mode: every run's plan (the engine's check mode: discovery only, outcome planned)."""
        return [entry for run in self._runs("plan") for entry in run.result["results"]]

    def delete(self):
        """Delete every owned resource: each region's rows on the steps engine (regions side by side), then the
        global rows, then the final pass of every run. When the step budget ran out during a wait, the results so far
        (and self.pending_state says where the next step goes on)."""
        per_region = steps.side_by_side(self._delete_region, range(len(self.regions)), self.concurrency)
        results = [r for dummy, region_results in per_region for r in region_results or ()]
        cut = {r: run.result["resume"] for r, (run, dummy) in zip(self.regions, per_region) if "resume" in run.result}
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
            if found.final:  # the final pass: a role kept here is still there, so it is a leftover
                return
            kept.extend(r for r in plan["iam-role"] if r["cluster"] in blocked)
            plan["iam-role"] = [r for r in plan["iam-role"] if r["cluster"] not in blocked]

        final = self._run(len(self.regions), "delete", settle=settle)
        results += _results(final.execute())
        # the final pass, once every deletion ended: each run's verification (regions and global side by side)
        runs = [run for run, dummy in per_region] + [final]
        steps.side_by_side(lambda run: run.verification(), runs, 1 if self.concurrency == 1 else self.concurrency + 1)
        self.left = [aws_delete.public(item, ownership.LEFT) for run in runs for item in run.found]
        why = "kept: {} is not deleted yet and may need this role; run the sweep again"
        return results + [rows.public(r, "failed", why.format(blocked[r["cluster"]])) for r in kept]

    def _delete_region(self, order):
        """(its steps.Run, its results; None when its sweep stopped): the run of a region that ended in an earlier
        step goes on from its final state, so that its final pass comes with the others'."""
        region = self.regions[order]
        done = self.resume.get("done", {})
        state = done[region] if region in done else self.resume.get("regions", {}).get(region)
        run = self._run(order, "delete", resume=state)
        if region in done and state is None:  # stopped in an earlier step: only its final pass is left
            return run, None
        try:
            return run, _results(run.execute())
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self._region_failed(region, exc)
            return run, None

    def _pending(self, per_region, cut):
        """The state the next step goes on from: each cut region's steps.Run state, the final state of the others
        (None for one whose sweep stopped), and what is still deleting (``waiting``)."""
        order = {t.name: i for i, t in enumerate(REGION_TYPES)}
        pending = [p for region in self.regions if region in cut for p in cut[region]["pending"]]
        pending.sort(key=lambda p: (self.regions.index(p[2]["region"]), order.get(p[0], len(order))))
        return {
            "account_id": self.account_id,
            "regions": cut,
            "done": {
                region: None if results is None else run.state()
                for region, (run, results) in zip(self.regions, per_region)
                if region not in cut
            },
            "waiting": [
                "{} {} {} ({})".format(h["region"], h["type"], h["id"], h.get("state", "deleting"))
                for dummy, dummy2, h, dummy3 in pending
            ],
        }

    def report(self, min_age_hours, now=None):
        """The orphan report's entries: the engine's (cloud_report.orphans over every run in check mode), once a resource
        without a creation time of its own took its cluster's oldest (``age_from_cluster``)."""
        runs = self._runs("report")
        items = [item for run in runs for step in run.acting for item in run.plan[step.name]]
        oldest = {}
        for item in items:
            created = cloud_report.created_at(item["_created"])
            if created is not None:
                oldest[item["cluster"]] = min(oldest.get(item["cluster"], created), created)
        for item in items:
            if cloud_report.created_at(item["_created"]) is None and item["cluster"] in oldest:
                item.update(_created=oldest[item["cluster"]].isoformat(), _from_cluster=True)
        now = now or _now()
        entries = [entry for run in runs for entry in cloud_report.orphans(run, now, min_age_hours)[1]]
        for entry in entries:
            del entry["stage"]  # the AWS report's resources keep their fields (docs/aws-orphan-sweep.md)
        return entries


def _results(result):
    """A run's result entries; a deletion that failed while it was followed says why in its reason."""
    for entry in result["results"]:
        if "error" in entry:
            entry["reason"] = entry.pop("error")
    return result["results"]


# The registry of the sweep's services: each module's ROWS (aws_delete.sweep_row, a steps.Row each), in that
# service's deletion order. A scope's table is the rows of that scope (regional or global) in this order, each moved
# after the rows it names in ``after`` (steps.ordered: a row named there is placed first, just before the first row
# that names it; the rest keep the registry's order, so the table is the same on every import). Its order is the
# deletion order: within a chain, and for the rows without a chain after every chain. aws_tagging is the last
# regional service: its ``unsupported`` row reports what no other row handles. Adding a type is one row in its
# service's file, in its ROWS.
SERVICES = (aws_eks, aws_logs, aws_ec2, aws_rds, aws_elb, aws_vpc, aws_tagging, aws_s3, aws_iam, aws_cloudformation)


def table(scope, services=SERVICES):
    """The rows of ``scope`` (aws_rows.REGION or GLOBAL) of ``services``, in the registry's order, each after the rows
    it names in ``after``; ValueError (at import) for a cycle or a name no row of the scope has."""
    found = [row for service in services for row in service.ROWS if row.scope == scope]
    try:
        return tuple(steps.ordered(found))
    except ValueError as exc:
        raise ValueError(f"the AWS sweep's {scope} rows: {exc}") from None


REGION_TYPES = table(rows.REGION)
GLOBAL_TYPES = table(rows.GLOBAL)
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
        result["report_files"] = cloud_report.write_report(
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
        raise aws_targets.SweepError(
            "_resume is internal to the action plugin's steps (delete mode only); do not set it"
        )
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
        sweep.collect()
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
        result["leftovers"] = sweep.left  # the final pass's (the engine's verification); none before the last step
        if (
            sweep.pending_state is not None
        ):  # the step budget ran out during a wait: the action plugin runs the next step
            result[steps.PENDING_KEY] = True
            result[steps.RESUME_KEY] = sweep.pending_state
            result["waiting"] = sweep.pending_state["waiting"]

    sweep.collect()
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
