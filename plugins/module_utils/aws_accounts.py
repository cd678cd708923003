# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep of several accounts (``[[environments.<env>.accounts]]``): each account through its own
role (STS AssumeRole), every identity proved before anything is listed, the results grouped by account."""

from __future__ import annotations

import time

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils import aws_report
from ansible_collections.krops.platform.plugins.module_utils import aws_targets
from ansible_collections.krops.platform.plugins.module_utils import aws_rows as rows
from ansible_collections.krops.platform.plugins.module_utils import steps
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError


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


# Accounts swept at the same time when the concurrency option does not say: each account has its own session,
# clients and AWS request-rate budget, so the bound is only there to keep the threads (accounts x regions x
# chains) and sockets of one process in check.
ACCOUNTS_AT_ONCE = 8


def run_accounts(conn, accounts, targets, all_regions, started, resume, sweep_account, **job):
    """Sweep every configured account (or the one account_id names), each through its own role, up to
    ``concurrency`` (default ACCOUNTS_AT_ONCE) accounts at a time, and group the result by account in the order of
    bootstrap.toml.

    Phase 1, for every account: its role is assumed and the account of the credentials read from STS's answer
    (assume_role). Only when every account has been through phase 1 does phase 2 list or delete anything: a role
    whose credentials belong to another account than its account-id refuses the whole run, before anything is
    listed or deleted in any account. An account whose role cannot be assumed, or whose sweep stops, is an error of
    that account (nothing is listed or deleted there); the others are swept with their own ownership proof, each
    with its own connection (session and clients). Several accounts run in one step (no resume).

    ``sweep_account`` is aws_sweep's sweep of one account, which this module (above it) is handed, not imported."""
    params, environment = job["params"], job["environment"]
    if resume is not None:
        raise aws_targets.SweepError(
            "_resume is internal to the action plugin's steps; a sweep of several accounts has none"
        )
    configured = [a.account_id for a in accounts]
    wanted = params.get("account_id")
    if wanted:
        if wanted not in configured:
            raise aws_targets.SweepError(
                "account_id {} is not an account of environment {} (its accounts: {}); name one of them, or leave "
                "account_id out to sweep them all".format(wanted, environment, ", ".join(configured))
            )
        accounts = [a for a in accounts if a.account_id == wanted]
    workers = params.get("concurrency") or ACCOUNTS_AT_ONCE

    def prove(account):
        """(account, its targets, its connection or None, the account its credentials belong to, the error)"""
        mine = aws_targets.account_targets(account, targets)
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
    plans = steps.side_by_side(prove, accounts, workers)
    for account, dummy, session, actual, dummy in plans:
        if session is not None and actual != account.account_id:
            raise aws_targets.SweepError(
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
            swept = rows.unique(t.region for t in mine)
            every = aws_targets.account_targets(account, aws_targets.environment_targets(job["cfg"], environment, True))
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
    parts = steps.side_by_side(sweep_one, plans, workers)
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
        "regions": rows.unique(r for p in parts for r in p["regions"]),
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
        aws_report.accounts_report(parts, result, job)
    result["api_calls"] = conn.counter.total
    result["api_calls_by_operation"] = dict(sorted(conn.counter.by_operation.items()))
    result["duration"] = round(time.monotonic() - started, 3)
    result["msg"] = "; ".join(p["msg"] for p in parts)
    result["failed"] = any(p["failed"] for p in parts)
    return result
