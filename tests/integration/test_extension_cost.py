"""What extending krops costs (issue 24), measured rather than claimed.

docs/extending.md gives each extension's cost as a number of code files. Each test here makes the extension as
a real edit in a copy of plugins/ and roles/ (tmp_path, a git repository of its own), counts the files the edit
touched (``git add -A``, then ``git diff --cached --name-only``: new files too), checks that count against the
``| code |`` row of docs/extending.md, and runs the copy's code in a Python process of its own, where the copy
is krops.platform:

- a resource type: one row in gcp_rows.py deletes an owned Private Service Connect address that otherwise holds
  its VPC (the Google double), and a row in azure_rows.py (with its discovery and its API version) deletes an owned
  storage account that the teardown otherwise leaves unseen (the ARM double);
- an AWS sweep type (its rows run on steps.Run): the row (with its ARN type, in the service's ROWS) and its
  handler in aws_ec2.py delete an owned EC2 key pair (moto); the sweep's table takes it from there;
- a pivot phase: a new phase runs in its place in the order, on the emulated kind and management clusters, and
  ``stop_after`` reaches it;
- a cloud: a rows file and a profile entry; its environments' teardown plan names its step, and the generic module
  krops.platform.cloud_teardown runs its rows (check mode, delete mode, bad settings), as the teardown role and the
  orphan report playbook do (one ansible-playbook run of the copy, in check mode).

The copy is made once per test, so an edit never reaches the repository or another test.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import azure_rows, cloud_teardown, gcp, gcp_rows, pivot
from tests.integration.test_aws_sweep_world import BOOTSTRAP_TOML, CAPA, clients
from tests.integration.test_pivot import ALL_OBJECTS, MGMT, world  # noqa: F401  # pylint: disable=unused-import
from tests.substrate.arm_double import ArmDouble
from tests.substrate.dummy_cloud import DummyCloud
from tests.substrate.fixtures import REPO, localhost_inventory, playbook_env, task_results
from tests.substrate.google_double import GoogleDouble
from tests.substrate.trees import copy_repo, edit

DOC = REPO / "docs" / "extending.md"
# Each of those tests runs the copy in a Python process of its own (a copy and a process: about a second).
SLOW = pytest.mark.slow
ENV_LABEL = "krops-environment"

# --- the copy, its git, its own Python ----------------------------------------------------


def _git(root, *argv):
    out = subprocess.run(
        ["git", "-c", "user.name=krops", "-c", "user.email=krops@example.invalid", *argv],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


class Copy:
    """plugins/, roles/ and bootstrap.toml, committed in a git repository of their own; ``python`` runs code
    with that copy as krops.platform."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path / "extension"  # beside, not in, what other fixtures make in tmp_path (World's repo/)
        self.root = copy_repo(
            self.tmp, ("plugins", "roles"), files=("bootstrap.toml",), ignore=shutil.ignore_patterns("__pycache__")
        )
        _git(self.root, "init", "-q")
        _git(self.root, "add", "-A")
        _git(self.root, "commit", "-qm", "the repository as it is")
        self.collections = self.tmp / "collections"
        (self.collections / "ansible_collections" / "krops").mkdir(parents=True)
        (self.collections / "ansible_collections" / "krops" / "platform").symlink_to(self.root)

    def touched(self):
        """The files changed or added since the last commit (the count docs/extending.md gives)."""
        _git(self.root, "add", "-A")
        return sorted(_git(self.root, "diff", "--cached", "--name-only").split())

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())

    def edit(self, rel, old, new):
        edit(self.root, rel, old, new)

    def python(self, job, **params):
        """Run DRIVER's ``job`` in a new process whose krops.platform is the copy; its JSON answer."""
        driver = self.tmp / "driver.py"
        driver.write_text(DRIVER)
        env = dict(os.environ, PYTHONPATH=str(self.collections), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run(
            [sys.executable, str(driver), job, json.dumps(params, default=str)],
            cwd=self.tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        assert answer.pop("origin").startswith(str(self.collections)), "the driver did not run the copy's code"
        return answer


@pytest.fixture
def repo_copy(tmp_path):
    return Copy(tmp_path)


def doc_code_files(section):
    """The number of code files docs/extending.md gives in the ``| code |`` row of its section ``## <section>``."""
    text = DOC.read_text()
    match = re.search(rf"(?ms)^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text)
    assert match, f"docs/extending.md has no section {section!r}"
    rows = re.findall(r"(?m)^\| code \| (\d+)\b", match.group(1))
    assert rows, f"docs/extending.md, {section}: no | code | N | row"
    return [int(n) for n in rows]


# The code that runs in the copy's process: ``driver.py <job> <JSON parameters>`` prints one JSON line.
DRIVER = r'''
import json, sys
job, params = sys.argv[1], json.loads(sys.argv[2])
import ansible_collections.krops.platform.plugins.module_utils.steps as steps
answer = {"origin": steps.__file__}


def gcp(p):
    from ansible_collections.krops.platform.plugins.module_utils import cloud_teardown, gcp, gcp_rows
    http, roots = cloud_teardown.Http("gcp-token", retries=0), gcp.gcp_roots(p["url"])
    run = dict(poll_interval=0, wait_timeout=10, sleep=lambda s: None)
    return {
        "planned": gcp_rows.gcp_teardown(http, roots, "p1", "gcp", p["networks"], check_mode=True, **run),
        "result": gcp_rows.gcp_teardown(http, roots, "p1", "gcp", p["networks"], **run),
    }


def azure(p):
    from ansible_collections.krops.platform.plugins.module_utils import azure_rows, cloud_teardown
    http = cloud_teardown.Http("arm-token", retries=0)
    return {"result": azure_rows.azure_teardown(http, p["url"], p["subscription"], "azure", [], [], [],
                                                poll_interval=0, sleep=lambda s: None)}


def run_module(name, args, check_mode=False):
    """The result of module ``name`` of the copy, run as run_module (tests/substrate/fixtures.py) runs one."""
    import importlib
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    module = importlib.import_module("ansible_collections.krops.platform.plugins.modules." + name)

    class Done(Exception):
        pass

    got = {}

    def exit_json(self, **kw):
        got.update(kw)
        raise Done()

    def fail_json(self, msg, **kw):
        got.update(kw, msg=msg, failed=True)
        raise Done()

    basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json = exit_json, fail_json
    with patch_module_args(dict(args, _ansible_check_mode=check_mode, _ansible_diff=False)):
        try:
            module.main()
        except Done:
            pass
    return module, got


def pivot(p):
    from ansible_collections.krops.platform.plugins.module_utils import pivot
    import yaml

    capi_pivot, result = run_module("capi_pivot", p["args"])
    documented = yaml.safe_load(capi_pivot.DOCUMENTATION)["options"]["stop_after"]["choices"]
    return {"result": result, "phases": list(pivot.PHASES), "documented": documented,
            "spec": capi_pivot.argument_spec()["stop_after"]["choices"]}


def sweep(p):
    return {"result": run_module("aws_orphan_sweep", p["args"])[1]}


def cloud(p):
    from ansible_collections.krops.platform.plugins.module_utils import config, profiles, teardown_plan

    args = dict(environment="lab", config_file=p["toml"], settings=p["settings"], poll_interval=0, wait_timeout=30)
    bad = {"unknown": dict(p["settings"], region="north"), "missing": {"url": p["settings"]["url"]}}
    answer = {key: run_module("cloud_teardown", dict(args, settings=value))[1] for key, value in bad.items()}
    answer["planned"] = run_module("cloud_teardown", args, check_mode=True)[1]
    answer["result"] = run_module("cloud_teardown", args)[1]
    answer["again"] = run_module("cloud_teardown", args)[1]  # the final pass: nothing owned is left
    cfg = config.load(p["toml"], environ={})
    host = {"host": "unreachable", "pivoted": False, "kind_reachable": False, "kind_marker": {"owned": True}}
    answer["plan"] = [s["action"] for s in teardown_plan.build_plan(cfg, "lab", host)]
    answer["profile"] = profiles.as_dict(profiles.get("dummy"))
    return answer


answer.update({"gcp": gcp, "azure": azure, "pivot": pivot, "sweep": sweep, "cloud": cloud}[job](params))
print(json.dumps(answer, default=str))
'''


# --- a resource type: one row -------------------------------------------------------------

PSC_ROW = """    _row(
        "psc-address",
        "firewalls-routers-peerings",
        lambda s: s.vpc_parts(
            "addresses",
            "psc-address",
            "Private Service Connect address",
            keep=lambda a: a.get("purpose") == "PRIVATE_SERVICE_CONNECT",
        ),
        ["bucket"],
    ),
"""
VPC = "krops-vpc"


@pytest.fixture
def google():
    double = GoogleDouble(polls=1, page_size=2)
    yield double
    double.stop()


def psc_world(g):
    """An owned VPC holding a Private Service Connect endpoint's address (a global INTERNAL address of purpose
    PRIVATE_SERVICE_CONNECT on the VPC: cloud.google.com vpc/docs/about-accessing-google-apis-endpoints, "global
    internal IP addresses within your VPC network"), and a team VPC holding another one."""
    g.add_network(VPC, labels={ENV_LABEL: "gcp"})
    g.add_compute("subnetworks", f"{VPC}-nodes", VPC, region="europe-north1")
    g.add_compute("addresses", "krops-apis", VPC, purpose="PRIVATE_SERVICE_CONNECT", addressType="INTERNAL")
    g.add_network("team-vpc")
    g.add_compute("addresses", "team-apis", "team-vpc", purpose="PRIVATE_SERVICE_CONNECT", addressType="INTERNAL")


@SLOW
def test_a_gcp_resource_type_is_one_row_in_one_file(repo_copy, google):
    psc_world(google)
    # today: no row lists the address, and the VPC it sits in cannot go (resourceInUseByAnotherResource)
    http = cloud_teardown.Http("gcp-token", retries=0)
    before = gcp_rows.gcp_teardown(
        http, gcp.gcp_roots(google.url), "p1", "gcp", [VPC], poll_interval=0, wait_timeout=10, sleep=lambda s: None
    )
    assert before["leftovers"] == [f"network/{VPC}"]
    assert ("compute", "global/addresses/krops-apis") in google.inventory()

    rows = "plugins/module_utils/gcp_rows.py"
    repo_copy.edit(rows, '    _row(\n        "subnetwork",', PSC_ROW + '    _row(\n        "subnetwork",')
    repo_copy.edit(rows, '    "router",\n    "subnetwork",', '    "router",\n    "psc-address",\n    "subnetwork",')
    repo_copy.edit(
        rows, '["vpc-peering", "firewall-rule", "router"]', '["vpc-peering", "firewall-rule", "router", "psc-address"]'
    )
    assert repo_copy.touched() == [rows]
    assert doc_code_files("Adding a GCP or Azure resource type: one row")[0] == 1

    answer = repo_copy.python("gcp", url=google.url, networks=[VPC])
    planned = [line for line in answer["planned"]["plan"] if "psc-address" in line]
    assert planned == [f"delete psc-address krops-apis (Private Service Connect address of owned VPC {VPC})"]
    result = answer["result"]
    assert result["leftovers"] == [] and "stopped_at" not in result
    assert [(r["type"], r["name"], r["outcome"]) for r in result["results"]] == [
        ("psc-address", "krops-apis", "deleted"),
        ("network", VPC, "deleted"),  # its subnet went in the first run
    ]
    assert google.inventory() == {("compute", "global/networks/team-vpc"), ("compute", "global/addresses/team-apis")}


STORAGE_DISCOVERY = """def _storage_accounts(s):
    found = []
    for account in s.pages("/providers/Microsoft.Storage/storageAccounts", "storage-account"):
        why = azure.azure_owned(account, s.environment, [])
        if why:
            found.append({"type": "storage-account", "id": account["id"], "name": account["name"], "reason": why})
    return found


def _groups(s):"""


@pytest.fixture
def arm():
    double = ArmDouble(token="arm-token", delete_polls=1)
    yield double
    double.stop()


@SLOW
def test_an_azure_resource_type_is_one_row_with_its_api_version_in_one_file(repo_copy, arm):
    """An Azure type is its discovery and one TABLE line in azure_rows.py; the line carries the API version its
    calls use (Microsoft.Storage storageAccounts 2023-01-01, a version of its REST reference)."""
    arm.add_group("team-rg")
    owned = arm.add(
        arm.rg_id("team-rg") + "/providers/Microsoft.Storage/storageAccounts/kropsstate", tags={ENV_LABEL: "azure"}
    )
    other = arm.add(arm.rg_id("team-rg") + "/providers/Microsoft.Storage/storageAccounts/teamstate")
    # today: no row lists storage accounts, so an owned one is left without a word
    http = cloud_teardown.Http("arm-token", retries=0)
    before = azure_rows.azure_teardown(
        http, arm.url, arm.subscription, "azure", [], [], [], poll_interval=0, sleep=lambda s: None
    )
    assert before["results"] == [] and arm.exists(owned)

    rows = "plugins/module_utils/azure_rows.py"
    repo_copy.edit(rows, "def _groups(s):", STORAGE_DISCOVERY)
    groups = '    ("resource-group", _groups, "2021-04-01"),'
    repo_copy.edit(
        rows, groups, '    ("storage-account", _storage_accounts, "2023-01-01"),  # Microsoft.Storage\n' + groups
    )
    assert repo_copy.touched() == [rows]
    assert doc_code_files("Adding a GCP or Azure resource type: one row")[1] == 1

    result = repo_copy.python("azure", url=arm.url, subscription=arm.subscription)["result"]
    assert [(r["type"], r["name"], r["outcome"]) for r in result["results"]] == [
        ("storage-account", "kropsstate", "deleted")
    ]
    assert result["leftovers"] == []
    assert not arm.exists(owned) and arm.exists(other) and arm.groups() == ["team-rg"]


# --- an AWS sweep type: the row (its ARN type, its place in ROWS) and its handler, one file --

KEY_PAIR_ROW = """

def delete_key_pair(x, res):
    # DeleteKeyPair takes KeyName or KeyPairId; moto honours KeyName only, so the name is looked up by the id
    found = aws.paginate(
        x.client("ec2"), "describe_key_pairs", "KeyPairs", Filters=[{"Name": "key-pair-id", "Values": [res["id"]]}]
    )
    if not found:
        return ABSENT
    aws.call(x.client("ec2"), "delete_key_pair", KeyName=found[0]["KeyName"])
    return None


KEY_PAIR_ROW = sweep_row(
    "key-pair",
    REGION,
    id_only("key-pair", "key", "describe_key_pairs", "KeyPairs", "key-pair-id", "KeyPairId"),
    delete_key_pair,
    arn="ec2:key-pair",
)
"""


@SLOW
def test_an_aws_sweep_type_is_a_row_and_its_handler_in_its_services_file(repo_copy, moto, tmp_path):
    """An AWS sweep type costs one code file (docs/extending.md): the row (with its ARN type) and its handler in
    the service's file, and the row in that file's ROWS; aws_sweep.py makes its table of every service's ROWS."""
    toml = tmp_path / "aws.toml"
    toml.write_text(BOOTSTRAP_TOML)
    ec2 = clients(moto, "eu-north-1")("ec2")
    for name, cluster in (("krops-workload", "eu-north-1-workload"), ("team-key", "team-cluster")):
        tags = [{"Key": CAPA % cluster, "Value": "owned"}]
        ec2.create_key_pair(KeyName=name, TagSpecifications=[{"ResourceType": "key-pair", "Tags": tags}])
    args = {"config_file": str(toml), "environment": "aws", "endpoint_url": moto, "wait_timeout": 5}
    # today: no row lists key pairs, so an owned one is left without a word
    before = repo_copy.python("sweep", args=args)["result"]  # the copy as it is
    assert not before.get("failed"), before.get("msg")
    assert not [r for r in before["results"] if r["type"] == "key-pair"]

    repo_copy.edit(
        "plugins/module_utils/aws_ec2.py",
        "\n\n# --- instances (CAPA AWSMachine)",
        KEY_PAIR_ROW + "\n\n# --- instances (CAPA AWSMachine)",
    )
    repo_copy.edit(
        "plugins/module_utils/aws_ec2.py", "    LAUNCH_TEMPLATE_ROW,\n", "    LAUNCH_TEMPLATE_ROW,\n    KEY_PAIR_ROW,\n"
    )
    repo_copy.edit(
        "plugins/module_utils/aws_ec2.py",
        "aws_rows import REGION, resource",
        "aws_rows import ABSENT, REGION, resource",
    )
    assert repo_copy.touched() == ["plugins/module_utils/aws_ec2.py"]
    assert doc_code_files("Adding an AWS resource type to the sweep") == [1]

    result = repo_copy.python("sweep", args=args)["result"]
    assert not result.get("failed"), result.get("msg")
    assert [(r["type"], r["outcome"]) for r in result["results"]] == [("key-pair", "deleted")]
    assert [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]] == ["team-key"]


# --- a pivot phase: one step (its file, its table row); the module's documentation lists it ---------------

INVENTORY_PHASE = '''
    # Copyright: krops developers
    # Apache License 2.0 (see LICENSE)
    """Phase inventory: the CAPI objects the move will carry, listed from the source (read only)."""

    from __future__ import annotations

    from ansible_collections.krops.platform.plugins.module_utils import kube
    from ansible_collections.krops.platform.plugins.module_utils.pivot.common import capi_objects


    def run(pv):
        found = capi_objects(pv.source, pv.namespace, phase="inventory")
        pv.result["inventory"] = [kube.key_label(key) for key in sorted(found)]
        pv.say(f">>> inventory: {len(found)} objects on the kind cluster")
'''
INVENTORY_RETURN = """inventory:
  description: The objects the move carries (C(Kind.group namespace/name)), listed by phase inventory.
  returned: when phase inventory ran
  type: list
  elements: str
  sample: [Cluster.cluster.x-k8s.io default/local-management]
failed_phase:"""
PHASE_LIST = re.compile(r"preconditions\W+export\W+prepare\W+preflight\W+(?:inventory\W+)?move")


def phase_lists(root):
    """The files under plugins/ and roles/ of ``root`` that write the phase names out as a list."""
    return sorted(
        str(path.relative_to(root))
        for folder in ("plugins", "roles")
        for path in (root / folder).rglob("*")
        if path.is_file() and path.suffix in (".py", ".yml", ".yaml", ".md") and PHASE_LIST.search(path.read_text())
    )


def code_of(path):
    """A module's code without its DOCUMENTATION, EXAMPLES and RETURN strings (ast.dump of what is left)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        names = [t.id for t in getattr(node, "targets", ()) if isinstance(t, ast.Name)]
        if set(names) & {"DOCUMENTATION", "EXAMPLES", "RETURN"}:
            node.value = ast.Constant("")
    return ast.dump(tree)


def test_code_of_sees_a_code_change_and_not_a_documentation_change(tmp_path):
    source = (REPO / "plugins/modules/capi_pivot.py").read_text()
    doc, code = tmp_path / "doc.py", tmp_path / "code.py"
    doc.write_text(source.replace("failed_phase:", INVENTORY_RETURN, 1))
    code.write_text(source.replace('default="move"', 'default="preflight"'))
    assert code_of(doc) == code_of(REPO / "plugins/modules/capi_pivot.py") != code_of(code)


def test_the_phase_list_is_written_out_once_in_code_where_sanity_checks_it():
    """The phase table (pivot.PHASE_TABLE) is the list; only the module's documentation repeats it (ansible-test
    sanity compares its choices with the argument spec, which takes them from the table). The pivot role passes
    pivot_stop_after to the module, which checks it, so adding a phase touches no role file."""
    assert PHASE_LIST.fullmatch(", ".join(pivot.PHASES))  # the pattern is today's table
    assert phase_lists(REPO) == ["plugins/modules/capi_pivot.py"]


@SLOW
def test_a_pivot_phase_is_one_step_its_file_and_its_table_row(repo_copy, world):  # noqa: F811
    repo_copy.write("plugins/module_utils/pivot/inventory.py", INVENTORY_PHASE)
    init = "plugins/module_utils/pivot/__init__.py"
    repo_copy.edit(
        init,
        "from ansible_collections.krops.platform.plugins.module_utils.pivot import move as _move\n",
        "from ansible_collections.krops.platform.plugins.module_utils.pivot import inventory as _inventory\n"
        "from ansible_collections.krops.platform.plugins.module_utils.pivot import move as _move\n",
    )
    repo_copy.edit(
        init,
        '    Phase("move", _move.run,',
        '    Phase("inventory", _inventory.run, "the objects the move carries"),\n    Phase("move", _move.run,',
    )
    module = "plugins/modules/capi_pivot.py"
    repo_copy.edit(
        module,
        "choices: [preconditions, export, prepare, preflight, move]",
        "choices: [preconditions, export, prepare, preflight, inventory, move]",
    )
    repo_copy.edit(module, "failed_phase:", INVENTORY_RETURN)
    assert repo_copy.touched() == [init, "plugins/module_utils/pivot/inventory.py", module]
    # the module's edit is documentation only (what ansible-doc shows): its code is the same without the strings
    assert code_of(repo_copy.root / module) == code_of(REPO / module)
    assert doc_code_files("Adding a pivot phase") == [2]
    assert phase_lists(repo_copy.root) == [module]  # nothing else lists the phases, so nothing else went stale

    stopped = repo_copy.python("pivot", args=world.args(stop_after="inventory"))
    assert stopped["phases"] == ["preconditions", "export", "prepare", "preflight", "inventory", "move"]
    assert stopped["documented"] == stopped["spec"] == stopped["phases"]  # what sanity compares
    result = stopped["result"]
    assert not result.get("failed"), result.get("msg")
    assert result["phase_reached"] == "inventory"
    assert f"Cluster.cluster.x-k8s.io default/{MGMT}" in result["inventory"]
    assert world.capi(world.kind) == ALL_OBJECTS and world.bins.calls("clusterctl") == []

    moved = repo_copy.python("pivot", args=world.args())["result"]
    assert not moved.get("failed"), moved.get("msg")
    assert moved["phase_reached"] == "move"
    lines = moved["progress"]
    at = lines.index(next(line for line in lines if line.startswith(">>> inventory:")))
    helm = max(i for i, line in enumerate(lines) if line.startswith(">>> helm upgrade"))
    clusterctl = lines.index(next(line for line in lines if line.startswith(">>> clusterctl move")))
    assert helm < at < clusterctl, lines  # after prepare, before the move
    assert world.capi(world.mgmt) == ALL_OBJECTS


# --- a cloud: one rows file, one profile entry ---------------------------------------------

DUMMY_ROWS = '''
    # Copyright: krops developers
    # Apache License 2.0 (see LICENSE)
    """The rows of the dummy cloud's teardown: its machines, then their volumes (each owned by its label)."""

    from __future__ import annotations

    from ansible_collections.krops.platform.plugins.module_utils import ownership, steps

    # The keys of krops.platform.cloud_teardown's settings option for this cloud (an argument spec).
    SETTINGS = dict(url=dict(type="str", required=True), token=dict(type="str", required=True, no_log=True))


    class _Api:
        def __init__(self, http, settings):
            self.http, self.url = http(settings["token"], what="dummy API"), settings["url"]


    class _Scan:
        def __init__(self, api, environment):
            self.api, self.environment = api, environment


    def _owned(kind):
        def discover(s):
            status, body = s.api.http.get(f"{s.api.url}/{kind}s")
            return [
                {"type": kind, "name": r["name"], "reason": f"label {ownership.CLOUD_ENV_LABEL}={s.environment}",
                 "_created": r.get("created")}
                for r in body.get("items", [])
                if r["labels"].get(ownership.CLOUD_ENV_LABEL) == s.environment
            ]

        return discover


    def _delete(run, item):
        status, body = run.ctx.http.request("DELETE", f"{run.ctx.url}/{item['type']}s/{item['name']}")
        return (ownership.ABSENT, None) if status == 404 else (ownership.DELETED, body["operation"])


    def _poll(run, handle):
        status, body = run.ctx.http.get(f"{run.ctx.url}/operations/{handle}")
        return (steps.DONE if status == 404 or body.get("done") else steps.PENDING), None


    ROWS = (
        steps.Row("machine", _owned("machine"), _delete, poll=_poll),
        steps.Row("volume", _owned("volume"), _delete, poll=_poll, after=["machine"]),
    )


    def cloud_run(settings, environment, http, **options):
        api = _Api(http, settings)
        return steps.Run(ROWS, api, lambda: _Scan(api, environment), **options)
'''
# The profile entry: the cloud and its step, and the function that imports its rows file (by name, so that AnsiballZ
# packs it; in a function, since a rows file imports steps, which imports ownership, which imports profiles.py).
DUMMY_IMPORT = """def dummy_rows():
    from ansible_collections.krops.platform.plugins.module_utils import dummy_rows as rows  # pylint: disable=import-outside-toplevel

    return rows


PROFILES = {"""
DUMMY_PROFILE = """    "dummy": _cloud("dummy", "dummy-teardown", cloud_rows=dummy_rows),
    "local-talos": """
LAB = """
[environments.lab]
kind = "dummy"
sync = "git"
sync-path = "mgmt/lab"
mgmt-cluster = "lab-management"
mgmt-ready-timeout = "15m"
infra-provider-namespace = "capd-system"
infra-provider-name = "docker"
"""
TOKEN = "dummy-token-5f1c"
CLOUD_STEP = "krops.platform.teardown : Delete what the environment owns in its cloud, row by row"
REPORT_TASK = "List owned resources older than the threshold (read-only)"


@pytest.fixture
def dummy_cloud():
    double = DummyCloud(TOKEN)
    double.add("machine", "m1", "lab")
    double.add("machine", "team-m")  # no label: not the environment's
    double.add("volume", "v1", "lab", machine="m1")  # cannot go while m1 is there (409)
    double.add("volume", "other-v", "lab-2")  # another environment's
    yield double
    double.stop()


def teardown_and_report(copy, toml, settings):
    """One ansible-playbook run, in check mode, of the copy's teardown role (forced: no controller host answers, so
    the plan is the cloud step alone) and of its orphan report playbook, both for environment lab: (rc, task results
    by name, stdout, stderr)."""
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "krops_environment": "lab",
                "teardown_config_file": str(toml),
                "teardown_kind_kubeconfig": str(copy.tmp / "no-kind.yaml"),
                "teardown_mgmt_kubeconfig": str(copy.tmp / "no-mgmt.yaml"),
                "teardown_force": True,
                "teardown_cloud_settings": settings,
                "teardown_cloud_poll_interval": 0,
            },
            "roles": [{"role": "krops.platform.teardown"}],
        }
    ]
    (copy.tmp / "teardown.yml").write_text(yaml.safe_dump(play))
    (copy.tmp / "extra.yml").write_text(yaml.safe_dump({"orphan_report_cloud_settings": settings}))
    env = playbook_env(
        copy.tmp,
        {
            "ANSIBLE_COLLECTIONS_PATH": str(copy.collections),  # the copy is krops.platform
            "KROPS_REPO_ROOT": str(copy.root),
            "KROPS_PROFILE": "lab",
            "BOOTSTRAP_CONFIG": str(toml),
            "ORPHAN_MIN_AGE_HOURS": "0",
        },
    )
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(localhost_inventory(copy.tmp / "hosts.yml")),
    ]
    argv += [str(copy.tmp / "teardown.yml"), str(copy.root / "playbooks" / "orphan_report.yml"), "--check"]
    argv += ["-e", "@" + str(copy.tmp / "extra.yml")]
    proc = subprocess.run(argv, cwd=copy.tmp, env=env, capture_output=True, text=True, check=False, timeout=300)
    results, text, at = {}, proc.stdout, 0
    while text[at:].strip():  # the json callback prints one document per playbook
        at += len(text[at:]) - len(text[at:].lstrip())
        document, at = json.JSONDecoder().raw_decode(text, at)
        results.update(task_results(document))
    return proc.returncode, results, proc.stdout, proc.stderr


@SLOW
def test_a_cloud_is_one_rows_file_and_one_profile_entry(repo_copy, dummy_cloud):
    """A cloud is a rows file and a profile entry (docs/extending.md): the loader takes its environments, their
    teardown plan names its step, the teardown role runs that step through the generic module
    krops.platform.cloud_teardown (its task file, cloud.yml, the fallback of teardown_step_files) and so does the
    orphan report (tasks/orphan-report-cloud.yml), with the settings the rows file declares."""
    # the orphan report playbook and the GitOps folder it checks for, committed before the edit: not counted
    shutil.copytree(REPO / "playbooks", repo_copy.root / "playbooks")
    (repo_copy.root / "mgmt" / "lab").mkdir(parents=True)
    (repo_copy.root / "mgmt" / "lab" / ".keep").write_text("")
    _git(repo_copy.root, "add", "-A")
    _git(repo_copy.root, "commit", "-qm", "the playbooks")

    repo_copy.write("plugins/module_utils/dummy_rows.py", DUMMY_ROWS)
    repo_copy.edit("plugins/module_utils/profiles.py", "PROFILES = {", DUMMY_IMPORT)
    repo_copy.edit("plugins/module_utils/profiles.py", '    "local-talos": ', DUMMY_PROFILE)
    assert repo_copy.touched() == ["plugins/module_utils/dummy_rows.py", "plugins/module_utils/profiles.py"]
    assert doc_code_files("Adding a cloud")[0] == 2

    toml = repo_copy.tmp / "lab.toml"  # an environment of the cloud is data (bootstrap.toml), not code
    toml.write_text((repo_copy.root / "bootstrap.toml").read_text() + LAB)
    settings = {"url": dummy_cloud.url, "token": TOKEN}
    before = dummy_cloud.inventory()
    listing = ["GET /machines", "GET /volumes"]

    # the teardown role, in check mode: its cloud step is the generic task file, which prints the plan and deletes
    # nothing; the orphan report lists the same two resources (their age: 2026-01-01, threshold 0)
    rc, results, stdout, stderr = teardown_and_report(repo_copy, toml, settings)
    assert rc == 0, ([(n, r.get("msg")) for n, r in results.items() if r.get("failed")], stderr[-3000:])
    assert results["krops.platform.teardown : Show the teardown plan"]["msg"][1:] == [
        "1. remove the dummy resources this environment created, the management cluster included (ownership-filtered; "
        "forced: no controller host answers)"
    ]
    assert results["krops.platform.teardown : Show the cloud teardown"]["msg"] == [
        "dummy:",
        "delete machine m1 (label krops-environment=lab)",
        "delete volume v1 (label krops-environment=lab)",
    ]
    assert results[CLOUD_STEP]["changed"] is True  # check mode: what would change
    report = results[REPORT_TASK]["report"]["json"]
    assert [(r["type"], r["name"], r["outcome"]) for r in report["resources"]] == [
        ("machine", "m1", "orphan"),
        ("volume", "v1", "orphan"),
    ]
    assert report["scope"] == f"url={dummy_cloud.url}" and report["cloud"] == "dummy"
    assert TOKEN not in stdout  # no_log in the rows file's SETTINGS: masked everywhere, the invocation included
    assert dummy_cloud.calls == listing * 2 and dummy_cloud.inventory() == before

    # the generic module in a process of its own: bad settings, check mode, delete mode, and a final pass
    dummy_cloud.calls.clear()
    answer = repo_copy.python("cloud", toml=str(toml), settings=settings)
    assert answer["unknown"] == {
        "failed": True,
        "changed": False,
        "msg": "option settings: unknown key region for cloud dummy (valid keys: token, url)",
    }
    assert answer["missing"]["msg"] == "option settings: missing key token for cloud dummy (valid keys: token, url)"
    assert answer["planned"]["plan"] == [
        "delete machine m1 (label krops-environment=lab)",
        "delete volume v1 (label krops-environment=lab)",
    ]
    assert [r["outcome"] for r in answer["planned"]["results"]] == ["planned", "planned"]
    result = answer["result"]
    assert not result.get("failed"), result.get("msg")
    assert [(r["type"], r["name"], r["outcome"]) for r in result["results"]] == [
        ("machine", "m1", "deleted"),
        ("volume", "v1", "deleted"),
    ]
    assert result["leftovers"] == [] and result["changed"] is True
    assert answer["again"]["plan"] == [] and answer["again"]["changed"] is False
    # check mode lists only; the machine's deletion is followed to its end (one pending poll) before its volume
    # goes (row volume runs after machine); the verification pass lists again, and so does the final pass
    assert (
        dummy_cloud.calls
        == listing
        + listing
        + [
            "DELETE /machines/m1",
            "GET /operations/machine/m1",
            "GET /operations/machine/m1",
            "DELETE /volumes/v1",
            "GET /operations/volume/v1",
            "GET /operations/volume/v1",
        ]
        + listing
        + listing
    )
    assert dummy_cloud.inventory() == ["machine/team-m", "volume/other-v"]  # what the environment does not own
    assert answer["profile"]["cloud"] == "dummy" and answer["profile"]["cloud-rows"] == "dummy_rows"
    assert answer["plan"] == ["dummy-teardown"]
    assert "dummy-teardown" not in (repo_copy.root / "roles" / "teardown" / "vars" / "main.yml").read_text()
