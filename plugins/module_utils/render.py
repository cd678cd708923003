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
import os
import re
import shutil
import subprocess
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


def build(directory, renderer=None, timeout=120):
    """Objects (list of dicts) of ``kubectl kustomize directory``; raises RenderError."""
    argv = list(renderer or find_kustomize()) + [directory]
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # rendering never needs a cluster
    try:
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise RenderError(directory, "kustomize did not finish within %d s" % timeout)
    except OSError as exc:
        raise RenderError(directory, f"cannot run {argv[0]}: {exc.strerror}")
    if proc.returncode != 0:
        raise RenderError(directory, _clean_reason(proc.stderr, directory))
    try:
        return [doc for doc in yaml.load_all(proc.stdout, Loader=_Loader) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise RenderError(directory, f"kustomize output is not YAML: {exc}")


# Builds of self-contained directories, keyed by renderer, directory and the content of every
# file under it. A kustomization that reaches outside its folder ("..", absolute paths,
# remote bases) is never cached.
_BUILD_CACHE = {}
_OUTSIDE = re.compile(r"(^|[\s'\"/:=-])\.\.(/|$)|^\s*-?\s*/|://|git@", re.M)


def _content_key(directory, renderer):
    digest = hashlib.sha256()
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(current, name)
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                return None
            if name in KUSTOMIZATION_FILES and _OUTSIDE.search(data.decode("utf-8", "replace")):
                return None
            digest.update(os.path.relpath(path, directory).encode("utf-8") + b"\0" + hashlib.sha256(data).digest())
    return (tuple(renderer), digest.hexdigest())


def render_directories(directories, renderer=None, jobs=None, timeout=120, cache=True):
    """{directory: list of objects or RenderError}, rendering in parallel (content-addressed cache)."""
    directories = list(directories)
    if not directories:
        return {}
    renderer = renderer or find_kustomize()
    jobs = jobs or min(8, (os.cpu_count() or 2) * 2, len(directories))

    def one(directory):
        key = _content_key(directory, renderer) if cache else None
        if key is not None and key in _BUILD_CACHE:
            return copy.deepcopy(_BUILD_CACHE[key])
        try:
            result = build(directory, renderer, timeout)
        except RenderError as exc:
            return exc
        if key is not None:
            if len(_BUILD_CACHE) > 2000:
                _BUILD_CACHE.clear()
            _BUILD_CACHE[key] = copy.deepcopy(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, directories))
    return dict(zip(directories, results))


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


def substitute(obj, variables):
    """A copy of ``obj`` with postBuild variables substituted (unless the object opts out)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(_SUBSTITUTE_ANNOTATION, "")).lower() == "disabled":
        return obj
    text = yaml.dump(obj, Dumper=_Dumper, default_flow_style=False, sort_keys=False, width=1 << 30)
    if not has_variables(text):
        return obj
    return yaml.load(substitute_text(text, variables), Loader=_SubstitutedLoader)


# The C loader/dumper when available: the tree can hold thousands of objects.
_Loader = getattr(yaml, "CSafeLoader", getattr(yaml, "SafeLoader", None))
_Dumper = getattr(yaml, "CSafeDumper", getattr(yaml, "SafeDumper", None))


if _Loader is not None:

    class _SubstitutedLoader(_Loader):
        """Flux decodes substituted YAML with sigs.k8s.io/yaml (yaml.v2): a timestamp-like plain scalar
        stays a string (yaml.v2 decode.go), where PyYAML would make it a datetime."""

    _SubstitutedLoader.add_constructor("tag:yaml.org,2002:timestamp", _SubstitutedLoader.construct_yaml_str)


def load_yaml_documents(path):
    """Documents of a YAML file (dicts only). Raises yaml.YAMLError / OSError."""
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.load_all(handle, Loader=_Loader) if isinstance(doc, dict)]
