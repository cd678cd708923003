"""krops.platform.aws_orphan_sweep over several accounts ([[environments.aws.accounts]]) on moto in server mode.

moto puts a request in the account of its credentials: STS AssumeRole of a role ARN in account X returns
credentials of account X (the role need not exist; docs/upstream-facts.md, "Several AWS accounts"). Four
accounts are seeded alike: 111111111111 and 222222222222 are configured (222222222222 for eu-west-1 only),
333333333333 is not, and the caller's own account 123456789012 is not either. Each holds the same owned
clusters (same tags, same names) and the same decoys.
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
import threading

import pytest
import test_aws_sweep_world as world
import test_aws_sweep as sweeps
from test_aws_sweep import sweep
from test_aws_sweep_world import BOOTSTRAP_TOML, normalise

from ansible_collections.krops.platform.plugins.module_utils import aws, aws_delete, config
from tests.substrate.aws_world import account_clients

A, B, C, CALLER = "111111111111", "222222222222", "333333333333", world.ACCOUNT
ROLE_A = f"arn:aws:iam::{A}:role/krops-teardown"
ROLE_B = f"arn:aws:iam::{B}:role/ops/krops-sweeper"

ACCOUNTS = textwrap.dedent(f"""\
    [[environments.aws.accounts]]
    account-id = "{A}"
    role-name = "krops-teardown"

    [[environments.aws.accounts]]
    account-id = "{B}"
    role-arn = "{ROLE_B}"
    regions = ["eu-west-1"]
    external-id = "krops-external-1"
    session-name = "krops-aws-teardown"
    duration = "1h"

    """)


def with_accounts(text=ACCOUNTS):
    return BOOTSTRAP_TOML.replace("[environments.aws.teardown]\n", text + "[environments.aws.teardown]\n", 1)


@pytest.fixture
def fast(monkeypatch):
    """test_aws_sweep's fast: short backoff and polls, and HTTP-boundary hooks on every client the module builds."""
    sweeps.short_backoff(monkeypatch)
    monkeypatch.setattr(aws_delete, "POLL_FIRST", 0.05)
    monkeypatch.setattr(aws_delete, "POLL_MAX", 0.2)
    monkeypatch.setattr(aws_delete, "EXPECTED_SCALE", 0.0)
    hooks = [
        ("before-call", sweeps._no_service_specific_credentials),  # pylint: disable=protected-access
        ("before-send.ec2.DeleteSecurityGroup", sweeps.referenced),
    ]
    monkeypatch.setattr(aws, "CLIENT_HOOKS", hooks)
    return hooks


@pytest.fixture
def toml(tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_text(with_accounts())
    return str(path)


@contextlib.contextmanager
def in_account(monkeypatch, endpoint, account):
    """The world's helpers (seed_*, inventory, vpc_defaults) act in ``account`` inside this block (a role assumed
    anew each time: moto's reset between tests forgets earlier credentials)."""
    clients = account_clients(endpoint, account, role="seed", assume=account != CALLER)
    with monkeypatch.context() as patch:
        patch.setattr(world, "clients", clients)
        patch.setattr(world, "ACCOUNT", account)  # the decoys' bucket names (the S3 namespace is shared)
        yield


def seed_account(monkeypatch, endpoint, account):
    """The three clusters (bucket names with this account), the global resources and the decoys in ``account``.
    Returns {cluster: owned set}, the global owned set, decoys."""
    with in_account(monkeypatch, endpoint, account):
        owned = {c[0]: world.seed_cluster(endpoint, *c, account=account) for c in world.CLUSTERS}
        globals_ = world.seed_global(endpoint)
        decoys = world.seed_decoys(endpoint)
    return owned, globals_, decoys


def inventory(monkeypatch, endpoint, account):
    with in_account(monkeypatch, endpoint, account):
        return world.inventory(endpoint)


def defaults(monkeypatch, endpoint, account, owned):
    with in_account(monkeypatch, endpoint, account):
        return world.vpc_defaults(endpoint, owned)


def per_account(result, key, account, outcome=None):
    items = [r for r in result[key] if r["account_id"] == account and (outcome is None or r["outcome"] == outcome)]
    return normalise(items)


def test_each_configured_account_loses_only_what_it_owns_and_decoys_and_other_accounts_survive(
    run_module, moto, toml, fast, monkeypatch, tmp_path
):
    seeded = {account: seed_account(monkeypatch, moto, account) for account in (A, B, C, CALLER)}
    before = {account: inventory(monkeypatch, moto, account) for account in seeded}
    # account A: every target (all its regions); account B: the eu-west-1 workload, the reader user (B's regions
    # are all of B) and the eu-west-1 clusterawsadm stack
    clusters_a, globals_a, dummy = seeded[A]
    owned_a = set().union(*clusters_a.values()) | globals_a
    clusters_b, globals_b, dummy = seeded[B]
    owned_b = clusters_b["eu-west-1-workload"] | {g for g in globals_b if g[0] in ("global", "eu-west-1")}
    expected = {A: normalise(_entries(owned_a)), B: normalise(_entries(owned_b))}
    gone_with_vpcs = {A: defaults(monkeypatch, moto, A, owned_a), B: defaults(monkeypatch, moto, B, owned_b)}
    assert len(gone_with_vpcs[A]) == 2 * 3 and len(gone_with_vpcs[B]) == 2

    report = sweep(run_module, moto, toml, mode="report", min_age_hours=0, report_path=str(tmp_path / "orphans.md"))
    assert not report.failed, report["msg"]
    data = report["report"]["json"]
    assert json.loads((tmp_path / "orphans.json").read_text())["account_ids"] == [A, B]
    assert (tmp_path / "orphans.md").read_text() == report["report"]["markdown"]
    assert [a["account_id"] for a in data["accounts"]] == [A, B]
    for entry in data["accounts"]:
        account = entry["account_id"]
        assert normalise(entry["resources"]) == expected[account], account
    assert data["count"] == len(expected[A]) + len(expected[B])
    markdown = report["report"]["markdown"]
    assert f"## Account `{A}` (role `{ROLE_A}`)" in markdown and f"## Account `{B}` (role `{ROLE_B}`)" in markdown
    assert C not in markdown and f"Account `{CALLER}`" not in markdown

    plan = sweep(run_module, moto, toml, check_mode=True)
    assert not plan.failed, plan["msg"]
    assert [a["account_id"] for a in plan["accounts"]] == [A, B] and plan["account_ids"] == [A, B]
    for account in (A, B):
        assert per_account(plan, "plan", account) == expected[account], account
    assert {account: inventory(monkeypatch, moto, account) for account in seeded} == before, "check mode changed"

    result = sweep(run_module, moto, toml)
    assert not result.failed, result["msg"]
    assert result["changed"] is True and result["leftovers"] == [] and result["errors"] == []
    assert result["msg"].startswith(f"account {A}: sweep of eu-north-1, eu-west-1: ")
    assert f"; account {B}: sweep of eu-west-1: " in result["msg"]
    for account in (A, B):
        assert per_account(result, "results", account, "deleted") == expected[account], account
        assert inventory(monkeypatch, moto, account) == before[account] - expected[account] - gone_with_vpcs[account]
        section = next(a for a in result["accounts"] if a["account_id"] == account)
        assert section["failed"] is False and section["leftovers"] == []
    for account in (C, CALLER):  # not configured: identical owned resources, untouched
        assert inventory(monkeypatch, moto, account) == before[account], account
    after_b = inventory(monkeypatch, moto, B)
    for cluster in ("eu-north-1-workload", "eu-north-1-management"):  # B's eu-north-1 is not B's: kept
        assert normalise(_entries(clusters_b[cluster])) <= after_b, cluster
    for account in (A, B):  # every decoy survives
        dummy, dummy, decoys = seeded[account]
        after = inventory(monkeypatch, moto, account)
        for key in ("untagged-vpc", "untagged-subnet", "shared-subnet", "prefix-vpc", "other-vpc", "prefix-nat"):
            assert any(item[2] == decoys[key] for item in after), (account, key)
        assert ("global", "iam-user", "krops-reader2") in after

    again = sweep(run_module, moto, toml)
    assert not again.failed, again["msg"]
    assert again["changed"] is False and again["leftovers"] == []
    assert {(r["type"], r["outcome"]) for r in again["results"]} <= {
        ("subnet", "absent"),
        ("vpc", "absent"),
        ("elastic-ip", "absent"),
    }
    again_report = sweep(run_module, moto, toml, mode="report", min_age_hours=0)
    assert again_report["report"]["json"]["count"] == 0


@pytest.mark.playbook
def test_the_orphan_report_playbook_reports_each_account_through_its_role_and_nothing_of_another(
    ansible_playbook, moto, toml, monkeypatch, tmp_path
):
    """playbooks/orphan-report.yml (ansible-playbook, the module through its action plugin) with two configured
    accounts: each is reported through its assumed role, in its own section; account C, which holds the same owned
    clusters and decoys but is not configured, is neither reported nor touched, nor are the decoys anywhere."""
    seeded = {account: seed_account(monkeypatch, moto, account) for account in (A, B, C)}
    before = {account: inventory(monkeypatch, moto, account) for account in seeded}
    clusters_a, globals_a, decoys_a = seeded[A]
    clusters_b, globals_b, decoys_b = seeded[B]
    expected = {
        A: normalise(_entries(set().union(*clusters_a.values()) | globals_a)),
        B: normalise(
            _entries(clusters_b["eu-west-1-workload"] | {g for g in globals_b if g[0] in ("global", "eu-west-1")})
        ),
    }
    results, data, markdown = sweeps.orphan_report_playbook(ansible_playbook, moto, toml, tmp_path / "reports")
    assert results["List owned resources older than the threshold (read-only)"]["account_ids"] == [A, B]
    assert data["account_ids"] == [A, B] and [a["account_id"] for a in data["accounts"]] == [A, B]
    assert [a["role_arn"] for a in data["accounts"]] == [ROLE_A, ROLE_B]
    for entry in data["accounts"]:
        assert normalise(entry["resources"]) == expected[entry["account_id"]], entry["account_id"]
    assert {r["account_id"] for r in data["resources"]} == {A, B}
    assert data["count"] == len(expected[A]) + len(expected[B])
    reported = {r["id"] for r in data["resources"]} | {c["id"] for c in data["candidates"]}
    for decoys in (decoys_a, decoys_b):  # not ours in either configured account
        assert not reported & set(decoys.values()), sorted(reported & set(decoys.values()))
    # C's resources carry the same tags and names as A's; its VPCs, subnets and the rest have their own ids
    c_ids = {item[2] for item in before[C]} - {item[2] for item in before[A] | before[B]}
    assert c_ids and not reported & c_ids
    sections = markdown.split("\n## Account ")
    assert [section.split("`", 2)[1] for section in sections[1:]] == [A, B]
    assert C not in markdown and f"- Accounts: `{A}`, `{B}`" in markdown
    assert results["Summarise the report"]["msg"].startswith(f"account {A}: orphan report: {len(expected[A])} owned ")
    assert f"; account {B}: orphan report: {len(expected[B])} owned " in results["Summarise the report"]["msg"]
    assert {account: inventory(monkeypatch, moto, account) for account in seeded} == before, "the report changed AWS"


def test_each_account_owns_only_the_clusters_it_lists(run_module, moto, tmp_path, fast, monkeypatch):
    """clusters = [...] places clusters in accounts: each account's proof is its own clusters' tags, so the same
    tags of another cluster in that account prove nothing there."""
    path = tmp_path / "bootstrap.toml"
    path.write_text(
        with_accounts(
            f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "krops-teardown"\n'
            'clusters = ["eu-west-1-workload"]\n\n'
            f'[[environments.aws.accounts]]\naccount-id = "{B}"\nrole-name = "krops-teardown"\n'
            'clusters = ["eu-north-1-workload", "eu-north-1-management"]\n\n'
        )
    )
    seeded = {account: seed_account(monkeypatch, moto, account) for account in (A, B)}
    before = {account: inventory(monkeypatch, moto, account) for account in (A, B)}
    clusters_a, globals_a, dummy = seeded[A]
    owned_a = clusters_a["eu-west-1-workload"] | {g for g in globals_a if g[0] in ("global", "eu-west-1")}
    clusters_b, globals_b, dummy = seeded[B]
    owned_b = (
        clusters_b["eu-north-1-workload"]
        | clusters_b["eu-north-1-management"]
        | {g for g in globals_b if g[0] in ("global", "eu-north-1")}
    )
    expected = {A: normalise(_entries(owned_a)), B: normalise(_entries(owned_b))}
    gone = {account: defaults(monkeypatch, moto, account, owned) for account, owned in ((A, owned_a), (B, owned_b))}
    result = sweep(run_module, moto, str(path))
    assert not result.failed, result["msg"]
    assert [(t["account_id"], t["cluster"]) for t in result["targets"]] == [
        (A, "eu-west-1-workload"),
        (B, "eu-north-1-workload"),
        (B, "eu-north-1-management"),
    ]
    for account in (A, B):
        assert per_account(result, "results", account, "deleted") == expected[account], account
        assert inventory(monkeypatch, moto, account) == before[account] - expected[account] - gone[account], account
    # the other clusters' identically tagged resources survive in each account
    assert normalise(_entries(clusters_a["eu-north-1-workload"])) <= inventory(monkeypatch, moto, A)
    assert normalise(_entries(clusters_b["eu-west-1-workload"])) <= inventory(monkeypatch, moto, B)


def _entries(owned):
    return [{"region": r, "type": t, "id": i} for r, t, i in owned]


def _recorder(calls):
    def record(model=None, **_kwargs):
        calls.append(f"{model.service_model.service_name}.{model.name}")

    return record


def test_a_role_that_lands_in_another_account_refuses_the_run_before_anything_is_listed(
    run_module, moto, toml, fast, monkeypatch
):
    for account in (A, B, C):
        with in_account(monkeypatch, moto, account):
            world.seed_cluster(moto, *world.CLUSTERS[1], account=account)
    before = {account: inventory(monkeypatch, moto, account) for account in (A, B, C)}

    def lands_in_c(parsed=None, **_kwargs):  # B's role answers as account C's (an endpoint that is not STS's)
        user = (parsed or {}).get("AssumedRoleUser") or {}
        if f":{B}:" in user.get("Arn", ""):
            user["Arn"] = user["Arn"].replace(f":{B}:", f":{C}:")

    calls = []
    fast.extend([("after-call.sts.AssumeRole", lands_in_c), ("after-call", _recorder(calls))])
    result = sweep(run_module, moto, toml)
    assert result.failed
    assert result["msg"] == (
        f"aws_orphan_sweep: account {B} (role {ROLE_B}): the assumed role's credentials belong to account {C} "
        f"(the AssumedRoleUser ARN of sts assume-role), not {B}; nothing was listed or deleted in any account; fix "
        "role-arn or account-id of that [[environments.aws.accounts]] table"
    )
    # one identity proof per account: the AssumeRole answer, no GetCallerIdentity; A's role (fine) was assumed
    # too, and nothing was listed in A either
    assert calls == ["sts.AssumeRole", "sts.AssumeRole"], calls
    assert {account: inventory(monkeypatch, moto, account) for account in (A, B, C)} == before


class _AccountsSeen:
    """Which account each request is in: the assumed credentials' access key (AssumeRole's answer) against the
    Credential of the request's SigV4 Authorization header."""

    def __init__(self):
        self.keys, self.calls, self.lock = {}, [], threading.Lock()
        self.b_called = threading.Event()
        self.a_waited_for_b, self.a_started = [], False

    def assumed(self, parsed=None, **_kwargs):
        arn = (parsed.get("AssumedRoleUser") or {}).get("Arn", "")
        self.keys[parsed["Credentials"]["AccessKeyId"]] = arn.split(":")[4]

    def account(self, request):
        found = re.search(r"Credential=([^/]+)/", request.headers.get("Authorization", b"").decode())
        return self.keys.get(found.group(1)) if found else None

    def sent(self, request=None, event_name="", **_kwargs):
        account = self.account(request) or "caller"  # the caller's own credentials: AssumeRole
        with self.lock:
            self.calls.append((account, event_name.split(".", 1)[1]))
        if account == B:
            self.b_called.set()
        return None

    def first_a_listing(self, request=None, **_kwargs):
        """A's first EC2 tag walk waits (at most 10 s) for a call of B: only an account swept beside it makes one."""
        if self.account(request) != A:
            return None
        with self.lock:  # A's two regions list at the same time: only the first waits
            first, self.a_started = not self.a_started, True
        if first:
            self.a_waited_for_b.append(self.b_called.wait(10))
        return None


@pytest.mark.parametrize("concurrency", [None, 1])
def test_accounts_are_swept_side_by_side_up_to_concurrency_and_grouped_in_bootstrap_order(
    run_module, moto, toml, fast, monkeypatch, concurrency
):
    owned = {}
    for account in (A, B):
        with in_account(monkeypatch, moto, account):
            owned[account] = world.seed_cluster(moto, *world.CLUSTERS[1], account=account)
    seen = _AccountsSeen()
    fast.extend(
        [
            ("after-call.sts.AssumeRole", seen.assumed),
            ("before-send.ec2.DescribeTags", seen.first_a_listing),
            ("before-send", seen.sent),
        ]
    )
    extra = {} if concurrency is None else {"concurrency": concurrency}
    result = sweep(run_module, moto, toml, **extra)
    assert not result.failed, result["msg"]
    # A's sections first whatever finished first: the order of bootstrap.toml, in every list
    assert [a["account_id"] for a in result["accounts"]] == [A, B] and result["account_ids"] == [A, B]
    assert [r["account_id"] for r in result["results"]] == sorted(
        (r["account_id"] for r in result["results"]), key=[A, B].index
    )
    assert [line.split(" ", 1)[0] for line in result["progress"]] == sorted(
        (line.split(" ", 1)[0] for line in result["progress"]), key=[A, B].index
    )
    for account in (A, B):
        assert per_account(result, "results", account, "deleted") == normalise(_entries(owned[account])), account
    listings = [account for account, dummy in seen.calls if account != "caller"]
    if concurrency is None:  # B was swept while A's first listing waited
        assert seen.a_waited_for_b == [True]
        assert listings.index(B) < len(listings) - listings[::-1].index(A) - 1
    else:  # one account at a time: every call of B after the last of A
        assert seen.a_waited_for_b == [False]
        assert listings == sorted(listings, key=[A, B].index)
    # phase 1 (both roles assumed, nothing else) before any listing in either account
    assert seen.calls[:2] == [("caller", "sts.AssumeRole")] * 2
    assert "caller" not in [account for account, dummy in seen.calls[2:]]


def test_an_assume_role_answer_without_an_assumed_role_arn_is_an_error_of_that_account(
    run_module, moto, toml, fast, monkeypatch
):
    with in_account(monkeypatch, moto, A):
        owned = world.seed_cluster(moto, *world.CLUSTERS[1], account=A)

    def no_identity(parsed=None, **_kwargs):  # an endpoint that is not STS's: credentials, but whose?
        if f":{B}:" in (parsed.get("AssumedRoleUser") or {}).get("Arn", ""):
            del parsed["AssumedRoleUser"]

    fast.append(("after-call.sts.AssumeRole", no_identity))
    result = sweep(run_module, moto, toml)
    assert result.failed
    assert [e["error"] for e in result["errors"]] == [
        f"account {B}: sts assume-role of {ROLE_B} in eu-west-1 answered AssumedRoleUser '', not an assumed-role "
        "ARN, so the account of its credentials is unknown; check the endpoint (endpoint_url, AWS_ENDPOINT_URL)"
    ]
    assert per_account(result, "results", A, "deleted") == normalise(_entries(owned))
    assert [a["failed"] for a in result["accounts"]] == [False, True]


def test_an_account_whose_role_cannot_be_assumed_fails_by_name_and_the_others_are_swept(
    run_module, moto, toml, fast, monkeypatch
):
    owned = {}
    for account in (A, B):
        with in_account(monkeypatch, moto, account):
            owned[account] = world.seed_cluster(moto, *world.CLUSTERS[1], account=account)
    before_b = inventory(monkeypatch, moto, B)

    def refuse_b(request=None, **_kwargs):
        body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
        if B.encode() in body:
            return _sts_error(request, "AccessDenied", f"not authorized to perform sts:AssumeRole on {ROLE_B}")
        return None

    fast.append(("before-send.sts.AssumeRole", refuse_b))
    result = sweep(run_module, moto, toml)
    assert result.failed
    assert result["errors"] == [
        {
            "account_id": B,
            "region": "",
            "type": "account",
            "error": (
                f"account {B}: cannot assume role {ROLE_B} (sts assume-role in eu-west-1): AccessDenied: not "
                f"authorized to perform sts:AssumeRole on {ROLE_B}; check that the role exists, that its trust "
                "policy lets the caller assume it (and the external-id, when it asks for one) and that the caller "
                "may call sts:AssumeRole"
            ),
        }
    ]
    assert per_account(result, "results", A, "deleted") == normalise(_entries(owned[A]))
    assert [a["failed"] for a in result["accounts"]] == [False, True]
    assert result["msg"].startswith(f"account {A}: sweep of eu-north-1, eu-west-1: 23 deleted; ")
    assert f"; account {B}: not swept (nothing listed or deleted there): cannot assume role {ROLE_B} " in result["msg"]
    assert inventory(monkeypatch, moto, B) == before_b


def _sts_error(request, code, message):
    from botocore.awsrequest import AWSResponse  # pylint: disable=import-outside-toplevel
    from test_aws_sweep import _Raw  # pylint: disable=import-outside-toplevel

    body = (
        "<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>"
        "<RequestId>r</RequestId></ErrorResponse>" % (code, message)
    ).encode()
    return AWSResponse(request.url, 403, {}, _Raw(body))


def test_account_id_selects_one_configured_account_and_refuses_any_other(run_module, moto, toml, fast, monkeypatch):
    for account in (A, B):
        with in_account(monkeypatch, moto, account):
            world.seed_cluster(moto, *world.CLUSTERS[1], account=account)
    before_a = inventory(monkeypatch, moto, A)
    only_b = sweep(run_module, moto, toml, account_id=B)
    assert not only_b.failed, only_b["msg"]
    assert only_b["account_ids"] == [B] and {r["account_id"] for r in only_b["results"]} == {B}
    assert inventory(monkeypatch, moto, A) == before_a
    other = sweep(run_module, moto, toml, account_id=C)
    assert other.failed
    assert other["msg"] == (
        f"aws_orphan_sweep: account_id {C} is not an account of environment aws (its accounts: {A}, {B}); name one "
        "of them, or leave account_id out to sweep them all"
    )


def test_without_accounts_the_sweep_is_the_callers_one_account(run_module, moto, tmp_path, fast, monkeypatch):
    path = tmp_path / "bootstrap.toml"
    path.write_text(BOOTSTRAP_TOML)
    world.seed_cluster(moto, *world.CLUSTERS[1])
    with in_account(monkeypatch, moto, A):
        world.seed_cluster(moto, *world.CLUSTERS[1], account=A)
    before_a = inventory(monkeypatch, moto, A)
    result = sweep(run_module, moto, str(path), include_management=False)
    assert not result.failed, result["msg"]
    assert result["account_id"] == CALLER and "accounts" not in result
    assert inventory(monkeypatch, moto, A) == before_a


BAD = [
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-nam = "x"\n',
        "environments.aws.accounts[0].role-nam: expected one of the known keys: account-id, ack-role-arn, clusters, "
        "duration, external-id, regions, role-arn, role-name, session-name; unknown key 'role-nam'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nack-role-arn = "arn:aws:iam::{B}:role/ack"\n',
        f"environments.aws.accounts[0].ack-role-arn: expected a role of account {A} (the account-id of this table), got "
        f"'arn:aws:iam::{B}:role/ack'; the ARN names account {B}; fix ack-role-arn or account-id",
    ),
    (
        '[[environments.aws.accounts]]\naccount-id = 111111111111\nrole-name = "x"\n',
        "environments.aws.accounts[0].account-id: expected a 12-digit AWS account ID as a string such as "
        '"123456789012", got 111111111111',
    ),
    (
        '[[environments.aws.accounts]]\naccount-id = "11111111111"\nrole-name = "x"\n',
        "environments.aws.accounts[0].account-id: expected a 12-digit AWS account ID as a string such as "
        "\"123456789012\", got '11111111111'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-arn = "arn:aws:iam::{B}:role/x"\n',
        f"environments.aws.accounts[0].role-arn: expected a role of account {A} (the account-id of this table), "
        f"got 'arn:aws:iam::{B}:role/x'; the ARN names account {B}; fix role-arn or account-id",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-arn = "arn:aws:iam::{A}:user/x"\n',
        "environments.aws.accounts[0].role-arn: expected an IAM role ARN such as "
        f"arn:aws:iam::123456789012:role/krops-teardown, got 'arn:aws:iam::{A}:user/x'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\n',
        f"environments.aws.accounts[0].role-arn: expected exactly one of role-arn and role-name (the IAM role krops "
        f"assumes in account {A}); neither is given",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nrole-arn = "arn:aws:iam::{A}:role/x"\n',
        f"environments.aws.accounts[0].role-arn: expected exactly one of role-arn and role-name (the IAM role krops "
        f"assumes in account {A}); both are given",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\n'
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "y"\n',
        f"environments.aws.accounts[].account-id[1]: expected distinct entries, got '{A}'; it repeats an earlier entry",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nregions = ["us-east-1"]\n',
        "environments.aws.accounts[0].regions[0]: expected a region of this environment: eu-north-1, eu-west-1 "
        "(mgmt-region and the aws-workloads regions), got 'us-east-1'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nclusters = ["eu-west-1-workloadx"]\n',
        "environments.aws.accounts[0].clusters[0]: expected a cluster of this environment: eu-north-1-management, "
        "eu-north-1-workload, eu-west-1-workload (mgmt-cluster and the aws-workloads cluster-name), got "
        "'eu-west-1-workloadx'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nclusters = ["eu-west-1-workload"]\n'
        f'[[environments.aws.accounts]]\naccount-id = "{B}"\nrole-name = "x"\nclusters = ["eu-west-1-workload"]\n',
        "environments.aws.accounts[1].clusters[0]: expected a cluster that no other account lists (a cluster lives "
        f"in one account), got 'eu-west-1-workload'; account {A} lists it too",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nclusters = []\n',
        "environments.aws.accounts[0].clusters: expected at least one cluster (leave the key out for every cluster "
        "of the environment), got an array",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nregions = []\n',
        "environments.aws.accounts[0].regions: expected at least one region (leave the key out for every region "
        "of the environment), got an array",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nduration = "10m"\n',
        "environments.aws.accounts[0].duration: expected an STS role session duration from 900s to 43200s (15m to "
        "12h) such as \"1h\" (AssumeRole DurationSeconds), got '10m'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nsession-name = "a b"\n',
        "environments.aws.accounts[0].session-name: expected an STS role session name: 2 to 64 of letters, digits "
        "and _+=,.@-, got 'a b'",
    ),
    (
        f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "x"\nexternal-id = "x"\n',
        "environments.aws.accounts[0].external-id: expected an STS external ID: 2 to 1224 of letters, digits and "
        "_+=,.@:/-, got 'x'",
    ),
]


@pytest.mark.parametrize("lines,message", BAD)
def test_bad_account_lines_fail_at_load_with_the_exact_message(lines, message):
    with pytest.raises(config.ConfigError) as err:
        config.loads(with_accounts(lines), path="bootstrap.toml")
    assert str(err.value) == f"bootstrap.toml: {message} (valid environments: aws, local-host)"


def test_accounts_on_another_platform_are_refused():
    text = BOOTSTRAP_TOML.replace(
        '[environments.local-host]\nkind = "local-host"\n',
        f'[environments.local-host]\nkind = "local-host"\naccounts = [{{account-id = "{A}", role-name = "x"}}]\n',
    )
    with pytest.raises(config.ConfigError) as err:
        config.loads(text, path="bootstrap.toml")
    assert str(err.value) == (
        "bootstrap.toml: environments.local-host.accounts: expected no accounts (only an environment of platform "
        "aws sweeps several accounts; this one is local-host), got an array (valid environments: aws, local-host)"
    )


def test_a_role_name_becomes_the_role_arn_of_its_account():
    loaded = config.loads(with_accounts(), path="bootstrap.toml")
    accounts = loaded.environment("aws").accounts
    assert [(a.account_id, a.role_arn, a.regions, a.duration) for a in accounts] == [
        (A, ROLE_A, (), None),
        (B, ROLE_B, ("eu-west-1",), 3600),
    ]
    with_path = config.loads(
        with_accounts(f'[[environments.aws.accounts]]\naccount-id = "{A}"\nrole-name = "/krops/sweeper"\n'),
        path="bootstrap.toml",
    )
    assert with_path.environment("aws").accounts[0].role_arn == f"arn:aws:iam::{A}:role/krops/sweeper"


def test_a_bad_account_line_fails_the_module_before_any_aws_call(run_module, moto, tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_text(with_accounts('[[environments.aws.accounts]]\naccount-id = "1"\nrole-name = "x"\n'))
    result = sweep(run_module, moto, str(path))
    assert result.failed
    assert result["msg"] == (
        f"aws_orphan_sweep: {path}: environments.aws.accounts[0].account-id: expected a 12-digit AWS account "
        "ID as a string such as \"123456789012\", got '1' (valid environments: aws, local-host)"
    )
