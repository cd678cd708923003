# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Rendering of the GitOps tree: kustomize builds and Flux postBuild substitution.

Importable without Ansible. ``kubectl kustomize`` (or a standalone ``kustomize``)
renders one directory; :func:`render_directories` renders many in parallel and
returns, per directory, either the objects or kustomize's reason for failing.
:func:`substitute` applies Flux's postBuild variable syntax (``${VAR}``,
``${VAR:=default}``, ``${VAR:-default}``, ``$${VAR}`` for a literal) the way
kustomize-controller does before it applies a build.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.krops.platform.plugins.module_utils import errors

try:
    import yaml

    HAS_YAML = True
except ImportError:  # PyYAML comes with ansible-core; only bare sanity environments lack it
    yaml = None
    HAS_YAML = False

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SKIP_DIRS = frozenset((".git", ".venv", ".collections", "node_modules", "__pycache__"))

# Flux's envsubst syntax. $${VAR} escapes; ${VAR}, ${VAR:=default}, ${VAR:-default}, ${VAR=default}.
_VARIABLE = re.compile(r"\$(\$?)\{([_a-zA-Z][_a-zA-Z0-9]*)(?:(:?[=-])([^}]*))?\}")
_SUBSTITUTE_ANNOTATION = "kustomize.toolkit.fluxcd.io/substitute"


# Bounds (docs/configuration.md, Bounds): what one YAML file of the tree may hold before anything parses it
# whole or hands it to kustomize, and the address space kustomize may take. A YAML bomb of 1 KB (aliases of
# aliases) expands to gigabytes; 50,000 levels of nesting take minutes; both end here in a clear error.
MAX_YAML_BYTES = 16 * 1024 * 1024
MAX_YAML_DEPTH = 200
MAX_YAML_NODES = 2_000_000  # nodes after alias expansion, over all documents of a file
DEFAULT_MEMORY_LIMIT = 2 * 1024**3  # bytes of address space for one kustomize run (RLIMIT_AS)


class YAMLLimitError(errors.ConfigError, ValueError):
    """A YAML file exceeds a bound (size, nesting depth, nodes after alias expansion)."""


def check_yaml_text(text, name="<text>", max_bytes=MAX_YAML_BYTES, max_depth=MAX_YAML_DEPTH, max_nodes=MAX_YAML_NODES):
    """Raise YAMLLimitError when text exceeds a bound, reading YAML events only (no document is built).

    Every alias counts the nodes of its anchor again, as a consumer that expands it would build them.
    """
    size = len(text.encode("utf-8")) if isinstance(text, str) else len(text)
    if size > max_bytes:
        raise YAMLLimitError(f"{name}: {size} bytes, more than the limit of {max_bytes} for one YAML file")
    if yaml is None:
        return
    try:
        _count_events(text, name, max_depth, max_nodes)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own nesting bound (1000) was hit first
            raise YAMLLimitError(f"{name}: nested deeper than {max_depth} levels") from None
        raise


def _count_events(text, name, max_depth, max_nodes):
    anchors = {}  # anchor -> nodes of the anchored node, its own aliases expanded
    stack = [[0, None]]  # [nodes so far, anchor] of each open collection
    total = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([1, event.anchor])
            total += 1
            if len(stack) - 1 > max_depth:
                raise YAMLLimitError(f"{name}: nested deeper than {max_depth} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            count, anchor = stack.pop()
            if anchor:
                anchors[anchor] = count
            stack[-1][0] += count
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            stack[-1][0] += 1
            if event.anchor:
                anchors[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            count = anchors.get(event.anchor, 1)
            total += count
            stack[-1][0] += count
        if total > max_nodes:
            raise YAMLLimitError(
                f"{name}: more than {max_nodes} nodes once its aliases are expanded (a YAML bomb?); "
                "write the repeated parts out or split the file"
            )


def check_yaml_file(path, **limits):
    """check_yaml_text for a file: its size is checked before it is read."""
    max_bytes = limits.get("max_bytes", MAX_YAML_BYTES)
    st = os.stat(path)
    if st.st_size > max_bytes:
        raise YAMLLimitError(f"{path}: {st.st_size} bytes, more than the limit of {max_bytes} for one YAML file")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    check_yaml_text(text, path, **limits)
    if not limits:
        _CHECKED[(path, st.st_size, st.st_mtime_ns)] = True  # check_tree_yaml need not read it again
    return text


_CHECKED = {}  # (path, size, mtime) of files that passed check_yaml_file


def check_tree_yaml(directory):
    """check_yaml_file on every YAML file under directory (inclusive): before kustomize reads any of them."""
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")) and name != "Kustomization":
                continue
            path = os.path.join(current, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (path, st.st_size, st.st_mtime_ns)
            if key not in _CHECKED:
                try:
                    check_yaml_file(path)
                except (yaml.YAMLError, ValueError) as exc:
                    if isinstance(exc, YAMLLimitError):
                        raise
                    # malformed YAML is kustomize's (and yamllint's) to report, with its position
                _CHECKED[key] = True


DEFAULT_DEADLINE = 300  # seconds a whole validate or render_diff run may take (docs/configuration.md, Bounds)
# The options of the modules that render under bounds (doc fragment krops.platform.render_bounds).
BOUNDS_ARGS = dict(deadline=dict(type="float", default=DEFAULT_DEADLINE), memory_limit=dict(type="int"))


class DeadlineExceeded(errors.ToolError):
    """A run crossed its overall deadline."""


class _Bounds:
    """The bounds of the run in progress (one per process; validate and render_diff set them, build reads them)."""

    def __init__(self):
        self.end = None
        self.seconds = None
        self.what = ""
        self.memory = None


BOUNDS = _Bounds()


class bounded:  # pylint: disable=invalid-name,too-few-public-methods
    """``with bounded("validate", deadline=300, memory=2 GiB):`` — builds inside stay under both bounds."""

    def __init__(self, what, deadline=None, memory=None):
        self.what, self.deadline, self.memory = what, deadline, memory
        self.saved = None

    def __enter__(self):
        self.saved = (BOUNDS.end, BOUNDS.seconds, BOUNDS.what, BOUNDS.memory)
        if self.deadline is not None or BOUNDS.end is None:  # a nested run keeps the outer run's deadline
            seconds = DEFAULT_DEADLINE if self.deadline is None else self.deadline
            if not math.isfinite(seconds) or seconds <= 0:
                raise ValueError(f"deadline must be a positive finite number of seconds, got {seconds!r}")
            BOUNDS.end, BOUNDS.seconds, BOUNDS.what = time.monotonic() + seconds, seconds, self.what
        BOUNDS.memory = self.memory or BOUNDS.memory
        return self

    def __exit__(self, *exc):
        BOUNDS.end, BOUNDS.seconds, BOUNDS.what, BOUNDS.memory = self.saved
        return False


def remaining():
    """Seconds left before the deadline of the run in progress (None without one)."""
    return None if BOUNDS.end is None else BOUNDS.end - time.monotonic()


def check_deadline(doing=""):
    """Raise DeadlineExceeded once the run in progress has crossed its deadline."""
    left = remaining()
    if left is not None and left <= 0:
        raise DeadlineExceeded(
            "{} did not finish within its deadline of {} s{}; raise the deadline option (docs/configuration.md, "
            "Bounds) or make the tree smaller".format(BOUNDS.what, BOUNDS.seconds, f" (while {doing})" if doing else "")
        )


# Sets RLIMIT_AS, then execs the renderer: the limit is set in the child without preexec_fn, which is not safe
# with the threads render_directories runs builds in (Python subprocess documentation).
_EXEC_FAILED = "krops-exec: "
_LIMITED = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write('%scannot run %s: %s' % (" + repr(_EXEC_FAILED) + ", sys.argv[2], exc.strerror))\n"
    "    sys.exit(127)\n"
)


_PRLIMIT_FAILED = "prlimit: failed to execute "


def _limited(argv, limit):
    """argv run with at most ``limit`` bytes of address space, so a runaway build fails instead of the host: through
    util-linux's prlimit when it is on PATH (it sets the limit on itself and execs, in a few milliseconds), else
    through a Python interpreter doing the same (a start of about 20 ms of CPU per build)."""
    prlimit = shutil.which("prlimit")
    if prlimit:
        return [prlimit, f"--as={int(limit)}"] + list(argv)
    return [sys.executable, "-c", _LIMITED, str(int(limit))] + list(argv)


def _exec_failure(proc, argv):
    """The reason when the renderer could not be started (either wrapper's message), else None."""
    stderr = proc.stderr or ""
    if proc.returncode != 127:
        return None
    if stderr.startswith(_EXEC_FAILED):
        return stderr[len(_EXEC_FAILED) :].strip()
    if stderr.startswith(_PRLIMIT_FAILED):  # "prlimit: failed to execute <path>: <strerror>"
        return "cannot run {}: {}".format(argv[0], stderr.strip().rsplit(": ", 1)[-1])
    return None


class RenderError(errors.ToolError):
    """kustomize could not build a directory (or could not be run at all)."""

    def __init__(self, directory, reason):
        self.directory = directory
        self.reason = reason
        super().__init__(f"{directory}: {reason}")


def find_kustomize(explicit=None, environ=None):
    """argv prefix of the renderer: explicit path, $KROPS_KUSTOMIZE, kubectl, then kustomize."""
    environ = os.environ if environ is None else environ
    chosen = explicit or environ.get("KROPS_KUSTOMIZE")
    candidates = [chosen] if chosen else ["kubectl", "kustomize"]
    for candidate in candidates:
        path = shutil.which(candidate) if os.path.basename(candidate) == candidate else candidate
        if path and os.access(path, os.X_OK):
            return [path, "kustomize"] if os.path.basename(path).startswith("kubectl") else [path, "build"]
    raise RenderError(
        "-",
        "no kustomize renderer found (looked for {}); install kubectl or kustomize, or set KROPS_KUSTOMIZE".format(
            " and ".join(candidates)
        ),
    )


def has_kustomization(directory):
    return any(os.path.isfile(os.path.join(directory, name)) for name in KUSTOMIZATION_FILES)


def kustomization_file(directory):
    for name in KUSTOMIZATION_FILES:
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return os.path.join(directory, KUSTOMIZATION_FILES[0])


def find_kustomization_dirs(top):
    """Every directory under ``top`` (inclusive) holding a kustomization file, sorted."""
    found = []
    for current, dirs, _files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        if has_kustomization(current):
            found.append(current)
    return sorted(found)


def _clean_reason(stderr, directory):
    text = (stderr or "").strip()
    # kubectl >= 1.30 logs through klog: E1130 05:47:05.176579 15083 run.go:72] "command failed" err="..."
    logged = re.search(r'\berr="((?:[^"\\]|\\.)*)"', text)
    if logged:
        text = logged.group(1).replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")
    text = re.sub(r"^error: ", "", text)
    # kustomize prints absolute paths; keep the message readable and stable.
    text = text.replace(os.path.abspath(directory) + os.sep, "").replace(os.path.abspath(directory), ".")
    return " ".join(text.split()) or "kustomize failed without a message"


def memory_limit(environ=None):
    """Bytes of address space a kustomize run may use: $KROPS_RENDER_MEMORY_LIMIT (bytes, or with K/M/G/Gi), else 2 GiB."""
    environ = os.environ if environ is None else environ
    raw = str(environ.get("KROPS_RENDER_MEMORY_LIMIT") or "").strip()
    if not raw:
        return DEFAULT_MEMORY_LIMIT
    m = re.fullmatch(r"([0-9]+)\s*([KMG]i?)?B?", raw, re.I)
    if not m or int(m.group(1)) <= 0:
        raise RenderError("-", f"KROPS_RENDER_MEMORY_LIMIT={raw!r} is not a positive size (bytes, or e.g. 512Mi, 2Gi)")
    unit = (m.group(2) or "").upper().rstrip("I")
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[unit]


def build(directory, renderer=None, timeout=120, memory=None):
    """Objects (list of dicts) of ``kubectl kustomize directory``; raises RenderError.

    The YAML files under directory are checked against the bounds first (check_tree_yaml); kustomize runs
    with at most ``memory`` bytes of address space (default memory_limit()).
    """
    argv = list(renderer or find_kustomize()) + [directory]
    try:
        check_deadline(f"rendering {directory}")
        check_tree_yaml(directory)
    except (YAMLLimitError, OSError) as exc:
        raise RenderError(directory, str(exc))
    memory = memory or BOUNDS.memory or memory_limit()
    left = remaining()
    if left is not None and left < timeout:
        timeout = max(1, int(left) + 1)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # rendering never needs a cluster
    try:
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            _limited(argv, memory),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        check_deadline(f"rendering {directory}")
        raise RenderError(directory, "kustomize did not finish within %d s" % timeout)
    except OSError as exc:
        raise RenderError(directory, f"cannot run {argv[0]}: {exc.strerror}")
    failed = _exec_failure(proc, argv)
    if failed is not None:
        raise RenderError(directory, failed)
    if proc.returncode != 0:
        reason = _clean_reason(proc.stderr, directory)
        if re.search(
            r"out of memory|cannot allocate memory|MemoryError|runtime: out of memory", proc.stderr or "", re.I
        ):
            reason = (
                f"kustomize ran out of its memory limit of {memory // 1024**2} MiB (KROPS_RENDER_MEMORY_LIMIT, "
                f"docs/configuration.md): {reason}"
            )
        raise RenderError(directory, reason)
    try:
        return [doc for doc in yaml.load_all(proc.stdout, Loader=_Loader) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise RenderError(directory, f"kustomize output is not YAML: {exc}")


# Builds keyed by their inputs (``_content_key``): the renderer, the content of every file under the directory
# (a kustomization file by its parsed YAML: comments and layout do not change a build) and, when a kustomization
# reaches outside its folder with "..", the folder it reaches (the "reach", searched through every kustomization
# file below it) with the content of every file there. Two sibling overlays with the same inputs (workload/<env>/*
# with only ``resources: [../base]``) have the same key, so one build serves both. A kustomization naming an
# absolute path or a remote base, and a symlink anywhere in the reach, make a directory uncacheable.
_BUILD_CACHE = {}
_REMOTE = re.compile(r"^\s*-?\s*/|://|git@", re.M)
_UP = re.compile(r"(?:^|(?<=[\s'\"/:=-]))\.\.(?=/|$|[\s'\"])", re.M)
_REACH_FILES = 5000  # files hashed for one reach at most; beyond it the directory is built uncached


def _tree_files(top):
    """(relative path, absolute path) of the files under ``top``, sorted; None when a symlink is among them."""
    found = []
    for current, dirs, files in os.walk(top):
        if any(os.path.islink(os.path.join(current, d)) for d in dirs):
            return None
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(current, name)
            if os.path.islink(path):
                return None
            found.append((os.path.relpath(path, top), path))
    return found


def _kustomization_digest(data):
    """A kustomization file's inputs: its YAML events (each scalar's value, explicit tag and whether it is plain,
    anchors and aliases), so comments, indentation, quote and flow styles do not count; any YAML reader types
    the same events the same way."""
    try:
        events = [
            (
                type(event).__name__,
                getattr(event, "anchor", None),
                getattr(event, "tag", None),
                getattr(event, "implicit", None),
                getattr(event, "value", None),
            )
            for event in yaml.parse(data.decode("utf-8", "replace"), Loader=_BaseLoader)
        ]
    except yaml.YAMLError:
        return hashlib.sha256(data).digest()  # kustomize reports it; the bytes are the input
    return hashlib.sha256(repr(events).encode("utf-8")).digest()


def _files_digest(top, kustomizations_parsed):
    """Digest of every file under ``top`` (kustomization files parsed when asked), and the ".." depth each
    kustomization file needs above ``top``; None when uncacheable."""
    files = _tree_files(top)
    if files is None or len(files) > _REACH_FILES:
        return None
    digest, need = hashlib.sha256(), 0
    for rel, path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        part = hashlib.sha256(data).digest()
        if os.path.basename(path) in KUSTOMIZATION_FILES:
            text = data.decode("utf-8", "replace")
            if _REMOTE.search(text):
                return None
            depth = rel.count(os.sep)  # folders between top and this file's folder
            need = max(need, len(_UP.findall(text)) - depth)
            if kustomizations_parsed:
                part = _kustomization_digest(data)
        digest.update(rel.encode("utf-8") + b"\0" + part)
    return digest.hexdigest(), need


def _content_key(directory, renderer, reaches=None):
    """The inputs of a build of ``directory`` (see _BUILD_CACHE), or None when it cannot be cached.

    ``reaches``: {folder: digest} shared by the directories of one render_directories call.
    """
    directory = os.path.abspath(directory)
    own = _files_digest(directory, True)
    if own is None:
        return None
    own_digest, need = own
    if need <= 0:
        return (tuple(renderer), "self", own_digest)
    reach = directory
    while True:  # the folder every kustomization below it stays within
        for _level in range(need):
            parent = os.path.dirname(reach)
            if parent == reach:
                return None  # reaches above the filesystem's root
            reach = parent
        found = reaches.get(reach) if reaches is not None else None
        if found is None:
            found = _files_digest(reach, False)
            if found is None:
                return None
            if reaches is not None:
                reaches[reach] = found
        need = found[1]
        if need <= 0:
            break
    # siblings only: the same parent and reach, the same own inputs (their folder names may differ)
    return (tuple(renderer), "reach", os.path.dirname(directory), reach, found[0], own_digest)


def render_directories(directories, renderer=None, jobs=None, timeout=120, cache=True):
    """{directory: list of objects or RenderError}, rendering in parallel (content-addressed cache).

    Directories with the same inputs (``_content_key``) are built once; a failed build is redone for each
    directory, so every error names its own directory.
    """
    directories = list(directories)
    if not directories:
        return {}
    renderer = renderer or find_kustomize()
    reaches = {}
    keys = {d: (_content_key(d, renderer, reaches) if cache else None) for d in directories}
    unique, seen = [], set()
    for directory in directories:
        key = keys[directory]
        if key is None or key not in seen:
            unique.append(directory)
            if key is not None:
                seen.add(key)
    jobs = jobs or min(8, (os.cpu_count() or 2) * 2, len(unique))

    def one(directory):
        key = keys[directory]
        if key is not None and key in _BUILD_CACHE:
            return copy.deepcopy(_BUILD_CACHE[key])
        try:
            result = build(directory, renderer, timeout)
        except (RenderError, DeadlineExceeded) as exc:
            return exc
        if key is not None:
            if len(_BUILD_CACHE) > 2000:
                _BUILD_CACHE.clear()
            _BUILD_CACHE[key] = copy.deepcopy(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        built = dict(zip(unique, pool.map(one, unique)))
    results = {}
    for directory in directories:
        if directory in built:
            results[directory] = built[directory]
            continue
        key = keys[directory]
        cached = _BUILD_CACHE.get(key)
        results[directory] = copy.deepcopy(cached) if cached is not None else one(directory)
    for result in results.values():
        if isinstance(result, DeadlineExceeded):
            raise result
    return results


class UnresolvedVariables(errors.ConfigError, ValueError):
    """Strict substitution met ${VAR}s with no value and no default; ``names`` in order of appearance."""

    def __init__(self, names):
        errors.ConfigError.__init__(self, "unresolved variables: {}".format(", ".join(names)))
        self.names = names


def substitute_text(text, variables, strict=False):
    """Flux postBuild substitution on text: ${VAR}, ${VAR:=default}, ${VAR:-default}; $${VAR} stays literal.

    Unset variables without a default become '' as in Flux, or, when strict, raise UnresolvedVariables.
    """
    missing = []

    def replace(match):
        escaped, name, operator, default = match.groups()
        if escaped:
            return match.group(0)[1:]
        value = variables.get(name)
        if operator is not None:
            if value is None or (operator.startswith(":") and value == ""):
                return default
        if value is None and strict:
            if name not in missing:
                missing.append(name)
            return match.group(0)
        return "" if value is None else str(value)

    result = _VARIABLE.sub(replace, text)
    if missing:
        raise UnresolvedVariables(missing)
    return result


def has_variables(text):
    return bool(_VARIABLE.search(text))


def mentions_variables(value):
    """Whether a string of ``value`` (a key or a value, at any depth) holds "${": without one, the YAML text of
    the object holds no variable (has_variables) and substitution leaves it as it is."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(mentions_variables(k) or mentions_variables(v) for k, v in value.items())
    if isinstance(value, list):
        return any(mentions_variables(v) for v in value)
    return False


def substitute(obj, variables):
    """A copy of ``obj`` with postBuild variables substituted (unless the object opts out)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(_SUBSTITUTE_ANNOTATION, "")).lower() == "disabled" or not mentions_variables(obj):
        return obj
    text = yaml.dump(obj, Dumper=_Dumper, default_flow_style=False, sort_keys=False, width=1 << 30)
    if not has_variables(text):
        return obj
    return yaml.load(substitute_text(text, variables), Loader=_Loader)


# The C loader/dumper when available: the tree can hold thousands of objects.
_BaseLoader = getattr(yaml, "CSafeLoader", getattr(yaml, "SafeLoader", None))
_Dumper = getattr(yaml, "CSafeDumper", getattr(yaml, "SafeDumper", None))


class _Loader(_BaseLoader or object):  # pylint: disable=too-many-ancestors
    """YAML as Kubernetes tooling reads it: an unquoted RFC 3339 time stays a string.

    kubectl and Flux decode manifests with go-yaml into plain values, where a timestamp is a string
    (a run tag such as ``krops.io/expires-at: 2026-12-02T00:00:00Z`` after substitution); PyYAML's
    timestamp resolver would turn it into a datetime that no string-typed schema field accepts.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in getattr(_BaseLoader, "yaml_implicit_resolvers", {}).items()
    }


def load_yaml_documents(path):
    """Documents of a YAML file (dicts only), within the bounds. Raises YAMLLimitError / yaml.YAMLError / OSError."""
    return load_yaml_text(check_yaml_file(path))


def load_yaml_text(text):
    """Documents (dicts only) of YAML text already within the bounds (check_yaml_text). Raises yaml.YAMLError."""
    return [doc for doc in yaml.load_all(text, Loader=_Loader) if isinstance(doc, dict)]
