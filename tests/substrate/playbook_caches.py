"""What the test suite's playbook runs keep for the whole test run: AnsiballZ payloads and collection metadata.

The suite starts about two hundred ansible-playbook processes, and each does again work whose result depends only
on files that do not change during the run (docs/testing.md). Its runs start through a launcher named
``ansible-playbook`` (``prewarm.playbook_command()``) that installs these two caches before ansible-playbook's own
``main``, each in a folder of the test run (tests/conftest.py makes it and the xdist workers share it; without
it, of the test process). The product never sees them.

- **AnsiballZ payloads** (``install``). ansible-core builds each module's payload (the module, every module_utils
  file it imports, found by parsing them: ``module_common.recursive_finder``) once per ansible-playbook process:
  a quarter of a run's CPU. Here what recursive_finder wrote into the payload (each file's name in the zip and its
  bytes, and the module's metadata) is kept under a key of the module (its name, its source's digest, its path),
  ansible-core's version, the compression and the search paths (module_utils folders, collection paths). A later
  run takes the kept files only when every source file they came from (ansible-core tags each with its path,
  ``Origin``) and the ``meta/runtime.yml`` of each collection they come from (redirects) still have the same size
  and mtime; otherwise it builds as ansible-core does and keeps the new result. A build that carries a file whose
  source it cannot name (an embed, a debugger or coverage extension) is not kept. The payload a module runs is the
  one ansible-core would have built, but for the zip entries' timestamps.
- **Collection metadata** (``install_metadata``). Every run parses ansible-core's 377 KB
  ``ansible_builtin_runtime.yml`` (and each collection's ``meta/runtime.yml`` it uses): 15% of a run's start.
  ansible-core leaves the parser to be replaced for this ("may be monkeypatched to another implementation ...
  content_id ... to allow other implementations to cache the output", ``_collection_meta._meta_yml_to_dict``);
  here its result is kept by the digest of the bytes parsed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys

from ansible import release
from ansible.executor import module_common
from ansible.utils.collection_loader import AnsibleCollectionConfig, _collection_finder
from ansible._internal._datatag._tags import Origin

# entries ansible-core writes without a source file of their own: the ansible package stubs (from its version)
# and the empty package inits it synthesises
_STUBS = ("ansible/__init__.py", "ansible/module_utils/__init__.py")


class _Recorder:
    """The ZipFile recursive_finder writes into, keeping what it writes."""

    def __init__(self, zf):
        self._zf = zf
        self.compression = zf.compression
        self.files = []

    def writestr(self, zinfo, data, *args, **kwargs):
        self.files.append((zinfo.filename, bytes(data), _origin(data)))
        return self._zf.writestr(zinfo, data, *args, **kwargs)


def _origin(data):
    tag = Origin.get_tag(data)
    return tag.path if tag is not None else None


def _signature(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _sources(files):
    """{path: signature} of every file the payload's entries came from, or None when one has no source to check."""
    sources = {}
    for name, data, origin in files:
        if origin is not None:
            sources[origin] = _signature(origin)
            parts = name.split("/")
            if parts[0] == "ansible_collections" and origin.endswith(name[len("/".join(parts[:3])) :]):
                root = origin[: len(origin) - len(name) + len("/".join(parts[:3]))]
                runtime = os.path.join(root, "meta", "runtime.yml")
                sources[runtime] = _signature(runtime)
        elif data and name not in _STUBS and not _redirect_shim(name, files):
            return None
    return sources


def _redirect_shim(name, files):
    """A module_utils entry ansible-core generated from a collection's routing (meta/runtime.yml): kept only when
    another entry of the same collection names that file."""
    parts = name.split("/")
    prefix = "/".join(parts[:3]) + "/"
    return parts[0] == "ansible_collections" and any(n.startswith(prefix) and o for n, _d, o in files)


def _searched(module_utils, collections):
    """The search paths a payload's key holds: the module_utils folders that exist (a test's own ANSIBLE_HOME adds
    one that does not) and the collection paths the loader can find a collection in, those holding an
    ansible_collections folder (a playbook's adjacent ``collections`` folder is a search path whether it exists or
    not). A folder that is not there resolves nothing, and a key per test folder kept nothing for the next test."""
    return (
        tuple(p for p in module_utils if os.path.isdir(p)),
        tuple(
            p
            for p in collections
            if os.path.basename(p) == "ansible_collections" or os.path.isdir(os.path.join(p, "ansible_collections"))
        ),
    )


def install(folder):
    """Wrap module_common.recursive_finder with the payload cache in folder (made if missing)."""
    os.makedirs(folder, exist_ok=True)
    build = module_common.recursive_finder

    def recursive_finder(name, module_fqn, module_data, zf, date_time, extension_manager):
        if extension_manager.extension_names:
            return build(name, module_fqn, module_data, zf, date_time, extension_manager)
        key = hashlib.sha256(
            repr(
                (
                    module_fqn,
                    hashlib.sha256(module_data).hexdigest(),
                    _origin(module_data),
                    release.__version__,
                    zf.compression,
                    _searched(
                        module_common.module_utils_loader._get_paths(subdirs=False),
                        AnsibleCollectionConfig.collection_paths or (),
                    ),
                    sys.version_info[:2],
                )
            ).encode()
        ).hexdigest()
        path = os.path.join(folder, key)
        kept = _load(path)
        if kept is not None and all(_signature(p) == sig for p, sig in kept["sources"].items()):
            for filename, data in kept["files"]:
                zf.writestr(module_common._make_zinfo(filename, date_time, zf=zf), data)
            return kept["metadata"]
        recorder = _Recorder(zf)
        metadata = build(name, module_fqn, module_data, recorder, date_time, extension_manager)
        sources = _sources(recorder.files)
        if sources is not None:
            _dump(path, {"files": [(n, d) for n, d, _o in recorder.files], "metadata": metadata, "sources": sources})
        return metadata

    module_common.recursive_finder = recursive_finder


def install_metadata(folder):
    """Replace the collection loader's runtime.yml parser with one that keeps its results in folder."""
    os.makedirs(folder, exist_ok=True)
    parse = _collection_finder._meta_yml_to_dict

    def meta_yml_to_dict(yaml_string_data, content_id):
        data = yaml_string_data.encode("utf-8") if isinstance(yaml_string_data, str) else bytes(yaml_string_data)
        path = os.path.join(folder, hashlib.sha256(data).hexdigest())
        kept = _load(path)
        if kept is None:
            kept = parse(yaml_string_data, content_id)
            _dump(path, kept)
        return kept

    _collection_finder._meta_yml_to_dict = meta_yml_to_dict


def _load(path):
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _dump(path, value):
    part = f"{path}.{os.getpid()}.part"
    with open(part, "wb") as handle:
        pickle.dump(value, handle)
    os.replace(part, path)
