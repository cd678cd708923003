"""The suite's tiers: every collected test is classified here, so a new test needs no marker.

- ``playbook``: the test (or a fixture or helper it uses, followed through the test tree) starts
  an ``ansible-playbook`` process: a string literal ``ansible-playbook`` in code it reaches.
- ``lifecycle``: it runs on the emulated host (tests/substrate/lifecycle.py: ``lifecycle_world``,
  ``emulated_world``, ``EmulatedWorld``), where the environments' whole lifecycles run.
- ``slow``: either of the two (also when marked by hand), or marked ``slow`` by hand (other costly processes: ansible-builder,
  galaxy-importer, a pytest run in a copy), or recorded in tests/benchmarks/durations.json at over
  QUICK_SECONDS (``make durations`` records them). ``make check`` runs ``-m "not slow"``.

The classification reads code, so it can miss a spawn hidden behind something it does not follow
(a name bound at run time). A guard catches that: a test not classified ``playbook`` that starts
``ansible-playbook`` in this process fails, naming the marker to add. docs/testing.md has the tiers.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import types

import pytest

pytest_plugins = ["tests.substrate.fixtures"]

TESTS = os.path.dirname(os.path.abspath(__file__))
# Names that put a test on the emulated host.
LIFECYCLE_NAMES = frozenset(("lifecycle_world", "emulated_world", "EmulatedWorld"))
PLAYBOOK = "ansible-playbook"

_seen = {}  # id(object) -> (spawns, lifecycle) of what it reaches


def _source_file(obj):
    """The file under tests/ that defines obj (a function or class), else None."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return None
    path = os.path.abspath(path) if path else ""
    return path if path.startswith(TESTS + os.sep) else None


_index = {}  # file -> {qualified name: its def node}; each file is parsed once


def _definition(obj, path):
    if path not in _index:
        defs = _index[path] = {}
        try:
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
        except (OSError, SyntaxError):
            tree = ast.Module(body=[], type_ignores=[])
        pending = [(tree, "")]
        while pending:
            node, prefix = pending.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defs.setdefault(prefix + child.name, child)
                    pending.append((child, prefix + child.name + "."))
                else:
                    pending.append((child, prefix))
    return _index[path].get(obj.__qualname__.replace("<locals>.", ""))


def _facts(node):
    """(spawns ansible-playbook, names, attributes) of a def node; docstrings do not count."""
    docs = set()
    spawns, names, attrs = False, set(), set()
    for sub in ast.walk(node):  # one pass: a class can be large
        if isinstance(sub, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = sub.body[0] if sub.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
        elif isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            attrs.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and id(sub) not in docs:
            spawns = spawns or sub.value == PLAYBOOK or sub.value.endswith("/" + PLAYBOOK)
    return spawns, names, attrs


def _reaches(obj, depth=0):
    """(spawns ansible-playbook, uses the emulated host) for obj and what it names, followed in tests/."""
    key = id(obj)
    if key in _seen:
        return _seen[key]
    _seen[key] = (False, False)  # a cycle adds nothing
    path = _source_file(obj)
    node = _definition(obj, path) if path else None
    if node is None:
        return _seen[key]
    spawns, names, attrs = _facts(node)
    lifecycle = bool((names | attrs) & LIFECYCLE_NAMES)
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    scope = getattr(obj, "__globals__", None) or (vars(module) if module else {})
    if depth < 8:
        for name in names:
            target = scope.get(name)
            if isinstance(target, types.ModuleType):
                # module.function: the attributes read anywhere in obj, looked up in a module of tests/.
                inside = os.path.abspath(getattr(target, "__file__", None) or "/").startswith(TESTS + os.sep)
                targets = [vars(target).get(a) for a in attrs] if inside else []
            else:
                targets = [target]
            for found in targets:
                # a decorated helper (contextlib.contextmanager, functools.wraps): its own source
                found = inspect.unwrap(found) if isinstance(found, types.FunctionType) else found
                if isinstance(found, (types.FunctionType, type)) and _source_file(found):
                    more = _reaches(found, depth + 1)
                    spawns, lifecycle = spawns or more[0], lifecycle or more[1]
    _seen[key] = (spawns, lifecycle)
    return _seen[key]


def classify(item):
    """The markers item gets: a subset of {'playbook', 'lifecycle', 'slow'}."""
    spawns, lifecycle = False, bool(set(item.fixturenames) & LIFECYCLE_NAMES)
    reached = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames:
        for fixturedef in info.name2fixturedefs.get(name, ()) if info else ():
            reached.append(fixturedef.func)
    for obj in reached:
        obj = inspect.unwrap(obj) if obj is not None else None
        if obj is not None and _source_file(obj):
            more = _reaches(obj)
            spawns, lifecycle = spawns or more[0], lifecycle or more[1]
    marks = set()
    # The emulated host runs its playbooks through helpers the walk may not follow (lifecycle.py's).
    if spawns or lifecycle:
        marks.add("playbook")
    if lifecycle:
        marks.add("lifecycle")
    if marks or any(item.get_closest_marker(m) for m in ("slow", "playbook", "lifecycle")):
        marks.add("slow")
    return marks


# A rough cost of one test of each kind, in seconds (docs/testing.md's profile), for the tests that
# make durations does not record: an emulated lifecycle runs for minutes, a playbook test for tens of seconds.
COST = {"lifecycle": 300, "playbook": 20}


def _cost(item, recorded):
    return recorded.get(item.nodeid) or max((COST[m] for m in COST if item.get_closest_marker(m)), default=1)


# --- measured cost: the recorded durations (tests/benchmarks/durations.json) ---------------------

DURATIONS = os.path.join(TESTS, "benchmarks", "durations.json")
# A test recorded above this many seconds (setup, call and teardown) is slow, whatever it starts:
# the quick tier is what answers in seconds (docs/testing.md).
QUICK_SECONDS = 0.5  # 2.0 until round 11: make check then took 205 s on an idle machine (target 120 s)


# The folder of the run's shared caches (the playbook launcher's, tests/substrate/playbook_caches.py, and the emulated
# Flux's kustomize builds), made by the process that starts the run and shared by its xdist workers (they inherit the
# environment): each AnsiballZ payload and each build is then made once a run, not once a worker. Removed at the end.
_CACHES = {}


def pytest_configure(config):
    from tests.substrate import prewarm

    prewarm.tune_gc(freeze=False)  # the emulators in this process allocate by the million (prewarm.GC_THRESHOLDS)
    # krops' validators beside the emulated API server's own verdicts, in every test process (differentials)
    from tests.substrate import product_differential

    product_differential.install()
    if hasattr(config, "workerinput") or os.environ.get(prewarm.CACHES_ENV):
        return
    import tempfile

    _CACHES["folder"] = os.environ[prewarm.CACHES_ENV] = tempfile.mkdtemp(prefix="krops-run-caches-")


def pytest_unconfigure(config):
    folder = _CACHES.pop("folder", None)
    if folder:
        import shutil

        from tests.substrate import prewarm

        os.environ.pop(prewarm.CACHES_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test's seconds to {os.path.relpath(DURATIONS)} (make durations)",
    )


def _recorded():
    try:
        with open(DURATIONS, encoding="utf-8") as handle:
            return json.load(handle)["seconds"]
    except FileNotFoundError:
        return {}


_measured = {}


def pytest_runtest_logreport(report):
    # On the xdist controller too: the workers' reports arrive here with their durations.
    _measured[report.nodeid] = _measured.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("record_durations") or hasattr(session.config, "workerinput"):
        return
    seconds = dict(_recorded())
    seconds.update({nodeid: round(value, 2) for nodeid, value in _measured.items()})
    with open(DURATIONS, "w", encoding="utf-8") as handle:
        json.dump({"threshold": QUICK_SECONDS, "seconds": dict(sorted(seconds.items()))}, handle, indent=0)
        handle.write("\n")


def pytest_collection_modifyitems(config, items):
    recorded = _recorded()
    for item in items:
        marks = classify(item)
        if recorded.get(item.nodeid, 0.0) > QUICK_SECONDS:
            marks.add("slow")
        for mark in sorted(marks):
            if not item.get_closest_marker(mark):
                item.add_marker(mark)
    # Costliest files first: pytest-xdist's loadfile hands out files in this order (the Makefile turns
    # off its reordering by test count, which put the few-test lifecycle files last, so one worker
    # ran a 20-minute lifecycle alone at the end). The order inside a file is kept.
    per_file = {}
    for item in items:
        per_file[item.path] = per_file.get(item.path, 0) + _cost(item, recorded)
    items.sort(key=lambda item: -per_file[item.path])


# --- the guard: a spawn the classifier missed -------------------------------------------------

_current = {"item": None, "spawned": []}


def _audit(event, args):
    if event != "subprocess.Popen" or _current["item"] is None:
        return
    argv = args[1]
    first = argv if isinstance(argv, (str, bytes)) else (argv[0] if argv else "")
    first = os.fsdecode(first).split()[0] if first else ""
    if os.path.basename(first) == PLAYBOOK or os.path.basename(os.fsdecode(args[0] or "")) == PLAYBOOK:
        _current["spawned"].append(first)


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _current["item"], _current["spawned"] = item, []
    try:
        return (yield)
    finally:
        _current["item"] = None
        if _current["spawned"] and not item.get_closest_marker("playbook"):
            pytest.fail(
                f"{item.nodeid} started ansible-playbook but tests/conftest.py did not classify it "
                "'playbook': mark it @pytest.mark.playbook (which makes it slow), or make the spawn visible to classify()",
                pytrace=False,
            )


def pytest_collection_finish(session):
    """Every test module is imported now: freeze what is alive (the libraries, the schemas loaded at import), so the
    collections during the tests do not walk it again."""
    import gc

    gc.freeze()
