"""The warm interpreter (tests/substrate/prewarm.py) runs a module as a fresh Python would.

The suite's playbook runs hand their module processes to it; these tests hold it to what a plain
`python AnsiballZ_x.py` does, so that no test passes because of it.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
import sys

import pytest
import yaml

from tests.substrate import prewarm
from tests.substrate.fixtures import REPO, VENV_BIN, localhost_inventory, playbook_env

# Each task shows one thing a module process takes from the run: its environment (the task's `environment:`
# included), the folder it starts in, its arguments, its exit status and stderr, and the kubeconfig default that
# the kubernetes client reads from KUBECONFIG when it is imported.
PLAY = [
    {
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            {"name": "env", "ansible.builtin.command": "printenv KROPS_PROBE", "environment": {"KROPS_PROBE": "task"}},
            {"name": "cwd", "ansible.builtin.command": {"cmd": "pwd", "chdir": "/tmp"}},
            {"name": "args", "ansible.builtin.command": {"argv": ["echo", "a b", "$HOME"]}},
            {"name": "rc", "ansible.builtin.command": "sh -c 'echo out; echo err >&2; exit 3'", "ignore_errors": True},
            {
                "name": "kubeconfig default",
                "krops.platform.capi_cluster_delete": {"context": "task-ctx", "request_timeout": 5},
                "environment": {"KUBECONFIG": "{{ task_kubeconfig }}"},
                "ignore_errors": True,
            },
            {
                "name": "bad option",
                "krops.platform.capi_cluster_delete": {"kubeconfig": "/x", "no_such_option": 1},
                "ignore_errors": True,
            },
        ],
    }
]
KEYS = ("rc", "stdout", "stderr", "msg", "failed", "changed", "cmd")


def _kubeconfig(path, context):
    """A kubeconfig whose one context points at a closed port."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return str(path)


def _run(tmp_path, side, warm):
    """The play from tmp_path/side; the kubeconfigs (the same files for both sides) in tmp_path."""
    kubeconfigs, tmp_path = tmp_path, tmp_path / side
    tmp_path.mkdir()
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    inventory = localhost_inventory(tmp_path / "hosts.yml")
    task_kubeconfig = _kubeconfig(kubeconfigs / "task.yaml", "task-ctx")
    argv = [
        str(VENV_BIN / "ansible-playbook"),
        str(play),
        "-i",
        str(inventory),
        "-e",
        f"task_kubeconfig={task_kubeconfig}",
    ]
    env = playbook_env(
        tmp_path,
        {"KROPS_PROBE": "controller", "KUBECONFIG": _kubeconfig(kubeconfigs / "controller.yaml", "controller-ctx")},
    )
    if warm:
        argv += ["-e", "ansible_python_interpreter=" + prewarm.start()]
    proc = subprocess.run(
        argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.stdout.lstrip().startswith("{"), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    output = json.loads(proc.stdout)
    results = {}
    for task in output["plays"][0]["tasks"]:
        result = task["hosts"]["localhost"]
        results[task["task"]["name"]] = {k: result[k] for k in KEYS if k in result}
    return proc.returncode, results


@pytest.mark.slow
def test_a_module_run_through_the_warm_interpreter_gives_what_a_fresh_python_gives(tmp_path):
    cold = _run(tmp_path, "cold", warm=False)
    warm = _run(tmp_path, "warm", warm=True)
    assert warm == cold
    rc, results = cold
    assert rc == 0
    assert results["env"]["stdout"] == "task"
    assert results["cwd"]["stdout"] == "/tmp"
    assert results["args"]["stdout"] == "a b " + os.environ["HOME"]  # the command module expands variables
    assert (results["rc"]["rc"], results["rc"]["stdout"], results["rc"]["stderr"]) == (3, "out", "err")
    # the kubeconfig the client read is the task's KUBECONFIG (the controller's has no task-ctx), and the message
    # names that file
    assert results["kubeconfig default"]["msg"].startswith(
        f"cluster at https://127.0.0.1:1 (context task-ctx in {tmp_path / 'task.yaml'}) does not answer: "
    ), results["kubeconfig default"]["msg"]
    assert "no_such_option" in results["bad option"]["msg"]


def _import_time_environment_reads(names):
    """(module, line) of every os.environ / os.getenv read that runs when one of the modules is imported."""
    for name in names:
        importlib.import_module(name)
    found = []
    for name, module in sorted(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not path.endswith(".py") or "site-packages" not in path:
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            try:
                tree = ast.parse(handle.read())
            except SyntaxError:
                continue
        stack = list(ast.iter_child_nodes(tree))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # runs when called, in the module's own process
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                found.append((name, node.lineno))
            stack.extend(ast.iter_child_nodes(node))
    return found


@pytest.mark.slow  # starts a Python process (the scan) or the server
def test_every_import_time_read_of_the_environment_is_redone_in_the_child():
    """A library that reads the environment when imported would keep the server's value: each such read must be
    in IMPORT_TIME_ENV, which the child redoes with the run's environment."""
    scan = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from tests.integration import test_prewarm as t; from tests.substrate import prewarm; "
            "print(json.dumps(t._import_time_environment_reads(prewarm.PRELOAD)))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )  # a fresh process: pytest's own modules are not the server's
    reads = json.loads(scan.stdout)
    assert reads, "the scan found nothing: it no longer sees kubernetes.config.kube_config's KUBECONFIG read"
    assert sorted({module for module, _line in reads}) == sorted(
        m for m in prewarm.IMPORT_TIME_ENV if m != "kubernetes.config"
    ), reads


def test_the_child_takes_the_runs_kubeconfig_default(monkeypatch):
    import kubernetes.config

    monkeypatch.setenv("KUBECONFIG", "/from/the/run")
    monkeypatch.setattr(kubernetes.config, "KUBE_CONFIG_DEFAULT_LOCATION", "/from/the/server")
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", "/from/the/server")
    prewarm._redo_import_time_env()  # pylint: disable=protected-access
    assert kubernetes.config.KUBE_CONFIG_DEFAULT_LOCATION == "/from/the/run"
    assert kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION == "/from/the/run"


@pytest.mark.slow  # starts a Python process (the scan) or the server
def test_anything_but_an_ansiballz_file_runs_on_the_real_python(tmp_path):
    client = prewarm.start()
    proc = subprocess.run(
        [client, "-c", "import sys; print(sys.executable, sys.argv[1:])", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, f"{sys.executable} ['x']")


@pytest.mark.slow  # starts a Python process (the scan) or the server
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_killed_client_takes_its_module_along(tmp_path, how):
    """A killed run ends the client: the forked module must not live on. A SIGTERM (ansible's worker ending)
    reaches the module, and the client ends by it, as a plain Python would."""
    marker = tmp_path / "alive"
    script = tmp_path / "AnsiballZ_sleep.py"
    script.write_text(
        "_ANSIBALLZ_WRAPPER = True\nimport os, time\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([prewarm.start(), str(script)])
    for _attempt in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.05)
    child = int(marker.read_text())
    os.kill(proc.pid, getattr(signal, how))
    assert proc.wait(timeout=10) == -getattr(signal, how)
    for _attempt in range(200):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the module process {child} outlived its client")


def _payload_file(path, names):
    """The text of a stand-in AnsiballZ file (written at ``path``) whose payload holds ``names``, as module_common
    writes zip_data."""
    import base64
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as payload:
        for name in names:
            payload.writestr(name, "")
    path.write_text(f"_ANSIBALLZ_WRAPPER = True\nzip_data='{base64.b64encode(buffer.getvalue()).decode()}',\n")
    return path.read_bytes()


def test_a_payload_bringing_ansible_files_of_its_own_runs_on_the_real_python(tmp_path):
    """The warm server's ansible package is the venv's (ansible.module_utils.basic is preloaded), where a library/
    module (ansible.legacy.*) or a playbook's module_utils cannot be found (review): such a payload is not warm."""
    from tests.substrate import prewarm_client

    site = prewarm._site_dir()  # pylint: disable=protected-access
    own = ["ansible/__init__.py", "ansible/module_utils/basic.py", "ansible_collections/krops/platform/x.py"]
    assert prewarm_client._brings_no_ansible_files(_payload_file(tmp_path / "a.py", own), site)
    legacy = own + ["ansible/legacy/rv_hello.py"]
    assert not prewarm_client._brings_no_ansible_files(_payload_file(tmp_path / "b.py", legacy), site)
    custom = own + ["ansible/module_utils/my_helpers.py"]
    assert not prewarm_client._brings_no_ansible_files(_payload_file(tmp_path / "c.py", custom), site)


@pytest.mark.slow  # starts ansible-playbook
def test_a_library_module_runs_through_the_warm_client(tmp_path):
    """A playbook's library/ module, run with the warm client as its interpreter, answers as on a plain Python."""
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "rv_hello.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "AnsibleModule(argument_spec={}).exit_json(changed=False, hello='world')\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - rv_hello:\n      register: out\n    - assert: {that: [out.hello == 'world']}\n"
    )
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "play.yml", "-e", "ansible_python_interpreter=" + prewarm.start()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_child_rebuilds_distros_instance_from_the_runs_environment(monkeypatch, tmp_path):
    """distro builds its LinuxDistribution at import from UNIXCONFDIR (review): the child builds it again."""
    import distro.distro

    monkeypatch.setattr(distro.distro, "_distro", distro.distro._distro)  # restored after the test
    monkeypatch.setattr(distro.distro, "_UNIXCONFDIR", distro.distro._UNIXCONFDIR)
    monkeypatch.setattr(distro.distro, "_UNIXUSRLIBDIR", distro.distro._UNIXUSRLIBDIR)
    monkeypatch.setenv("UNIXCONFDIR", str(tmp_path))
    prewarm._redo_import_time_env()  # pylint: disable=protected-access
    assert distro.distro._distro.etc_dir == str(tmp_path)


def test_a_precompiled_payload_source_gets_the_payloads_file_names_and_any_other_compiles_as_before(
    tmp_path, monkeypatch
):
    """prewarm._precompile: zipimport takes the server's code for a source it compiled (krops' own module_utils
    here), named after the payload's file in every nested code object, so a traceback or a __file__-based lookup
    reads the payload; a source it did not compile (one byte changed) is compiled from the payload as before."""
    import zipfile
    import zipimport

    monkeypatch.setattr(zipimport, "_compile_source", zipimport._compile_source)  # undone after the test
    monkeypatch.setattr(prewarm, "_COMPILED", {})
    prewarm._precompile()
    source = (REPO / "plugins/module_utils/steps.py").read_bytes()
    assert len(prewarm._COMPILED) > 100
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(payload, "w") as archive:
        archive.writestr("same_steps.py", source)
        archive.writestr("changed_steps.py", source.replace(b"DONE, PENDING, FAILED", b"DONE,  PENDING, FAILED"))
    renamed = []
    named = prewarm._named
    monkeypatch.setattr(prewarm, "_named", lambda code, filename: renamed.append(filename) or named(code, filename))
    for name, precompiled in (("same_steps", True), ("changed_steps", False)):
        renamed.clear()
        code = zipimport.zipimporter(str(payload)).get_code(name)
        assert bool(renamed) is precompiled, (name, renamed)
        filenames = set()
        stack = [code]
        while stack:
            found = stack.pop()
            filenames.add(found.co_filename)
            stack.extend(c for c in found.co_consts if isinstance(c, type(code)))
        assert filenames == {str(payload / f"{name}.py")}, (name, precompiled, filenames)
        namespace = {"__name__": name}
        exec(code, namespace)  # noqa: S102 - the module's own code, as zipimport would run it
        assert [
            row.name
            for row in namespace["ordered"](
                [namespace["Row"]("b", None, None, after=["a"]), namespace["Row"]("a", None, None)]
            )
        ] == ["a", "b"]
        assert namespace["Row"].plan_line.__code__.co_filename == str(payload / f"{name}.py")


# Builds krops.platform.engine_ping's payload entries three ways in one process: as ansible-core builds them, then
# through playbook_caches twice (a build it keeps, then a kept one); then a module_utils file it carries changes and
# the cache must build again. Prints each build's {entry: sha256} and whether the cache built (miss) or took (hit).
_PAYLOADS = """
import hashlib, io, json, sys, zipfile, datetime
sys.path.insert(0, sys.argv[3])
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.executor import module_common
from ansible._internal._ansiballz import _builder
from ansible._internal._datatag._tags import Origin
import playbook_caches

path = sys.argv[1] + "/ansible_collections/krops/platform/plugins/modules/engine_ping.py"
fqn = "ansible_collections.krops.platform.plugins.modules.engine_ping"
when = datetime.datetime(2026, 1, 1)

def build():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        data = open(path, "rb").read()
        module_common.recursive_finder("engine_ping", fqn, Origin(path=path).tag(data), zf, when,
                                       _builder.ExtensionManager.create(task_vars={}))
    with zipfile.ZipFile(out) as zf:
        return {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist()}

builds = {"plain": build()}
real = module_common.recursive_finder
calls = []
module_common.recursive_finder = lambda *a: calls.append(1) or real(*a)
playbook_caches.install(sys.argv[2])
for name in ("first", "second"):
    del calls[:]
    builds[name] = (build(), bool(calls))
with open(sys.argv[1] + "/ansible_collections/krops/platform/plugins/module_utils/engine.py", "a") as f:
    f.write("# changed\\n")
del calls[:]
builds["changed"] = (build(), bool(calls))
print(json.dumps(builds))
"""


@pytest.mark.slow  # starts a Python process that loads ansible's plugin loader
def test_a_kept_payload_is_what_ansible_core_builds_and_a_changed_source_is_built_again(tmp_path):
    """playbook_caches.install (the suite's launcher keeps the AnsiballZ payloads of a test process's playbook runs): the
    entries of a kept payload are the names and bytes ansible-core writes, and a module_utils file whose bytes
    change is read again."""
    collection = tmp_path / "collections" / "ansible_collections" / "krops" / "platform"
    collection.mkdir(parents=True)
    for part in ("plugins", "meta", "galaxy.yml"):
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, collection / part)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _PAYLOADS,
            str(tmp_path / "collections"),
            str(tmp_path / "kept"),
            str(REPO / "tests/substrate"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    builds = json.loads(proc.stdout)
    plain = builds["plain"]
    engine = "ansible_collections/krops/platform/plugins/module_utils/engine.py"
    assert engine in plain and "ansible/module_utils/basic.py" in plain
    assert builds["first"] == [plain, True]  # built by ansible-core, and kept
    assert builds["second"] == [plain, False]  # taken from what was kept: the same names and bytes
    changed, built = builds["changed"]
    assert built is True
    assert changed[engine] != plain[engine]
    assert {n: s for n, s in changed.items() if n != engine} == {n: s for n, s in plain.items() if n != engine}


def test_a_payloads_key_holds_only_the_search_paths_that_can_resolve_a_name(tmp_path):
    """A test's own ANSIBLE_HOME and a playbook's adjacent collections folder are search paths even when missing;
    the key leaves them out (they resolve nothing), so the next test's run takes the payload."""
    from tests.substrate import playbook_caches

    utils, empty, found = tmp_path / "module_utils", tmp_path / "empty", tmp_path / "found"
    utils.mkdir()
    empty.mkdir()
    (found / "ansible_collections").mkdir(parents=True)
    missing = [str(tmp_path / "home" / "plugins" / "module_utils"), str(tmp_path / "playbooks" / "collections")]
    assert playbook_caches._searched(
        [missing[0], str(utils)], [missing[1], str(empty), str(found), str(found / "ansible_collections")]
    ) == ((str(utils),), (str(found), str(found / "ansible_collections")))


def test_kept_collection_metadata_is_what_ansible_core_parses_and_other_bytes_are_parsed_again(tmp_path, monkeypatch):
    """playbook_caches.install_metadata: ansible-core's runtime.yml parser, replaced (as its docstring allows) by
    one that keeps each result by the digest of the bytes: the same bytes give an equal result without parsing
    them again, and a result is the caller's own (changing it changes no later answer); other bytes are parsed."""
    from ansible.utils.collection_loader import _collection_finder

    from tests.substrate import playbook_caches

    parsed = []
    parse = _collection_finder._meta_yml_to_dict
    monkeypatch.setattr(_collection_finder, "_meta_yml_to_dict", lambda d, i: parsed.append(i) or parse(d, i))
    playbook_caches.install_metadata(str(tmp_path / "metadata"))
    builtin = (Path(_collection_finder.__file__).parents[2] / "config" / "ansible_builtin_runtime.yml").read_bytes()
    plain = parse(builtin, ("ansible.builtin", "runtime.yml"))
    first = _collection_finder._meta_yml_to_dict(builtin, ("ansible.builtin", "runtime.yml"))
    first["plugin_routing"].clear()
    second = _collection_finder._meta_yml_to_dict(builtin, ("ansible.builtin", "runtime.yml"))
    assert second == plain and second["plugin_routing"]
    other = _collection_finder._meta_yml_to_dict(b"requires_ansible: '>=2.18'\n", ("krops.platform", "runtime.yml"))
    assert other == {"requires_ansible": ">=2.18"}
    assert parsed == [("ansible.builtin", "runtime.yml"), ("krops.platform", "runtime.yml")]
