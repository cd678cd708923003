"""A warm interpreter for the test suite's playbook runs: module processes without the import bill.

Every krops module that talks to Kubernetes spends about 0.9 s of its 1.2 s importing the kubernetes client
(pydantic, google-auth, the generated models; docs/testing.md), and a lifecycle test runs hundreds of them.
Here one server process per test process imports those libraries once; each module run then forks from it:

- ansible runs ``<interpreter> AnsiballZ_x.py`` as always; the interpreter is this file's client (``client()``),
  which hands the server its argv, environment, working directory and its stdin/stdout/stderr (SCM_RIGHTS);
- the server forks; the child takes that environment and those descriptors and runs the same AnsiballZ file
  with the same Python, as ``python FILE`` would (``__main__``, sys.argv, sys.path[0]); its exit status goes back
  to the client, which exits with it;
- the libraries' import-time reads of the environment are redone in the child (``IMPORT_TIME_ENV``);
- a signal the client gets goes to the child, and a child whose client is gone kills itself, so ansible's task
  timeout and a killed run stop the module as they would a plain one.

Only the AnsiballZ files run this way (anything else the client execs the real Python for, and so is a payload
that brings ansible/ files of its own: a ``library/`` module or a playbook's ``module_utils``, prewarm_client.py), and only where the
test suite opts in: ``playbook_args()`` gives ``-e ansible_python_interpreter=<client>`` when KROPS_PREWARM is
not ``0``. The product never sees it. What stays different: the module's parent process is the server, not
ansible's worker, so a stand-in that kills "the run" by walking up the process tree (standins/common.py
``kill_the_run``) cannot find it; tests that kill a run set KROPS_PREWARM=0.
"""

from __future__ import annotations

import array
import atexit
import hashlib
import importlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

from tests.substrate.prewarm_client import recv_exact

# The libraries krops' modules import; importing them is most of a module's cost. ansible.module_utils.basic is
# the same file the AnsiballZ payload carries (ansible-core packs its own module_utils); preloaded from the venv
# it saves each module run its import (about 0.3 s, the largest single import a module makes).
PRELOAD = (
    "ansible.module_utils.basic",
    "kubernetes",
    "kubernetes.dynamic",
    "kubernetes.config",
    "kubernetes_validate",
    "boto3",
    "botocore.session",
    "yaml",
    "jsonschema",
    "requests",
    "google.auth.transport.requests",
)
# module -> {attribute: its value from the environment}: what a preloaded library reads from the environment at
# import time, found by an AST scan of every module the preload imports (test_prewarm keeps this list complete).
IMPORT_TIME_ENV = {
    "kubernetes.config.kube_config": {
        "KUBE_CONFIG_DEFAULT_LOCATION": lambda env: env.get("KUBECONFIG", "~/.kube/config"),
    },
    "kubernetes.config": {"KUBE_CONFIG_DEFAULT_LOCATION": lambda env: env.get("KUBECONFIG", "~/.kube/config")},
    # ansible.module_utils.distro's backend: where a host's os-release files live
    "distro.distro": {
        "_UNIXCONFDIR": lambda env: env.get("UNIXCONFDIR", "/etc"),
        "_UNIXUSRLIBDIR": lambda env: env.get("UNIXUSRLIBDIR", "/usr/lib"),
        # built at import from the two above (review): built again, after them
        "_distro": lambda env: sys.modules["distro.distro"].LinuxDistribution(),
    },
    # only where awscrt is installed (botocore.compat reads it inside its `import awscrt.auth` try)
    "botocore.compat": {
        "HAS_CRT": lambda env: "awscrt.auth" in sys.modules and env.get("BOTO_DISABLE_CRT", "false").lower() != "true"
    },
}
# Collections whose plugin sources the server compiles once (_precompile): krops' own (the checkout) and those its
# roles call modules of; a payload carries them as source, which zipimport would otherwise compile on every run.
PRECOMPILED_COLLECTIONS = ("kubernetes/core", "community/docker", "community/sops")
_SERVER = {}


def enabled():
    return os.environ.get("KROPS_PREWARM", "1") != "0"


def playbook_args():
    """Extra ansible-playbook arguments that route module runs through the warm server (none when disabled)."""
    if not enabled():
        return []
    return ["-e", "ansible_python_interpreter=" + start()]


# The collector's thresholds for the suite's Python processes (tune_gc): the first generation collected every 20000
# allocations, not every 700. The emulators, ansible's templating and the kubernetes client allocate by the million,
# and each young collection walks the young objects: fewer, larger ones cost less in all. Only the test suite's.
GC_THRESHOLDS = (20000, 20, 20)


def tune_gc(freeze=True):
    """Collect less often (GC_THRESHOLDS); with ``freeze``, move every object alive now (the imported libraries) out
    of the collector's reach for good: later collections, and a forked child's, do not walk them again."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    if freeze:
        gc.freeze()


# The folder of the caches every process of a test run shares (tests/conftest.py sets it): playbook_caches.py's, and
# the emulated Flux's kustomize builds (flux_world)
CACHES_ENV = "KROPS_TEST_RUN_CACHES"


def playbook_command():
    """The ansible-playbook the suite's runs start: a launcher that keeps the AnsiballZ payloads built for this
    process's runs and the collection metadata they parse (playbook_caches.py), or the venv's own when the warm interpreter is disabled."""
    if not enabled():
        return os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    start()
    return _SERVER["playbook"]


def _site_dir():
    """The folder that holds the venv's ansible package (the client checks a payload's ansible/ files against it)."""
    import ansible

    return os.path.dirname(os.path.dirname(os.path.abspath(ansible.__file__)))


def _script(folder, name, flags, *lines):
    """folder/name: a Python script on this Python (with flags) that imports from this folder's modules first."""
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"#!{sys.executable} {flags}".rstrip() + "\nimport sys\n")
        handle.write(f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n")
        handle.write("".join(line + "\n" for line in lines))
    os.chmod(path, 0o755)
    return path


def start():
    """Start this process's server (once) and return the path of its client interpreter."""
    if _SERVER.get("pid") == os.getpid():
        return _SERVER["client"]
    folder = tempfile.mkdtemp(prefix="krops-warm-", dir="/tmp")  # a unix socket path has at most 108 bytes
    sock_path = os.path.join(folder, "s")
    client = _script(
        folder,
        "python",
        "-IS",
        "import prewarm_client",
        f"prewarm_client.main({sock_path!r}, {sys.executable!r}, {_site_dir()!r})",
    )
    # the caches of the whole test run when tests/conftest.py made a folder for them (its xdist workers share it:
    # every entry is written whole, os.replace), else of this process
    caches = os.environ.get(CACHES_ENV) or folder
    # named ansible-playbook, as the venv's console script (a stand-in finds "the run" by that name)
    playbook = _script(
        folder,
        "ansible-playbook",
        "",
        # as tune_gc (this script cannot import prewarm): and the objects left at the exit are not walked again
        f"import atexit, gc; gc.set_threshold(*{GC_THRESHOLDS!r}); atexit.register(gc.freeze)",
        "import playbook_caches",
        f"playbook_caches.install({os.path.join(caches, 'payloads')!r})",
        f"playbook_caches.install_metadata({os.path.join(caches, 'metadata')!r})",
        "del sys.path[0]",
        "from ansible.cli.playbook import main",
        "sys.exit(main())",
    )
    ready_r, ready_w = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tests.substrate import prewarm; prewarm.serve(sys.argv[1], int(sys.argv[2]))",
            sock_path,
            str(ready_w),
        ],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        pass_fds=(ready_w,),
        stdin=subprocess.DEVNULL,
    )
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        if ready.read(1) != b"1":
            raise RuntimeError("the warm interpreter did not start (see its stderr)")
    _SERVER.update(pid=os.getpid(), client=client, playbook=playbook, proc=proc, folder=folder)
    atexit.register(stop)
    return client


def stop():
    proc = _SERVER.pop("proc", None)
    if proc is not None and _SERVER.get("pid") == os.getpid():
        proc.terminate()
        proc.wait(timeout=10)
    folder = _SERVER.pop("folder", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


# ---- the server ------------------------------------------------------------------------------------


def serve(sock_path, ready_fd):
    for name in PRELOAD:
        importlib.import_module(name)
    _precompile()
    tune_gc()  # the children share the preloaded libraries, and their collections skip them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    while True:
        conn, _address = listener.accept()
        if os.fork() == 0:
            listener.close()
            _child(conn)  # never returns
        conn.close()


# ---- compiled payload sources ----------------------------------------------------------------------
# zipimport compiles a module's source each time a payload imports it, and twice (find_spec's get_filename
# compiles it, then get_code): a third of a warm module run. The server compiles the collections' plugin files
# once; a child's zipimport that meets the same source bytes takes that code, named after the payload's file
# (co_filename, in every nested code object), as compile() would have named it. Any other source compiles as before.
_COMPILED = {}  # sha256 of a source file's bytes -> its code, compiled once


def _precompile():
    import zipimport

    # found by path: importing ansible_collections here would hide a payload's own from every child
    roots = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins")]
    roots += [os.path.join(_site_dir(), "ansible_collections", name, "plugins") for name in PRECOMPILED_COLLECTIONS]
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), "rb") as handle:
                        source = handle.read()
                    _COMPILED[hashlib.sha256(source).digest()] = zipimport._compile_source("<precompiled>", source)
    compile_source = zipimport._compile_source

    def cached(pathname, source):
        code = _COMPILED.get(hashlib.sha256(source).digest())
        return compile_source(pathname, source) if code is None else _named(code, pathname)

    zipimport._compile_source = cached


def _named(code, filename):
    consts = tuple(_named(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _recv_request(conn):
    fds = array.array("i")
    header, ancdata, _flags, _addr = conn.recvmsg(8, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    (size,) = struct.unpack("!Q", header)
    body = recv_exact(conn, size)
    if body is None:
        raise EOFError
    return json.loads(body), list(fds)


def _child(conn):
    code = 1
    try:
        request, fds = _recv_request(conn)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        _redo_import_time_env()
        conn.sendall(struct.pack("!q", os.getpid()))
        threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own descriptors
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        code = _run_file(request["argv"])
    except BaseException:  # pylint: disable=broad-except
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        try:
            conn.sendall(struct.pack("!q", code))
        except OSError:
            pass
        os._exit(code)


def _run_file(argv):
    import runpy

    path = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as `python FILE` puts the file's folder first
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None:
            return 0
        if isinstance(exit_.code, int):
            return exit_.code
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:  # pylint: disable=broad-except
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _redo_import_time_env():
    for module, attributes in IMPORT_TIME_ENV.items():
        loaded = sys.modules.get(module)
        for attribute, value in attributes.items() if loaded is not None else ():
            setattr(loaded, attribute, value(os.environ))


def _die_with_client(conn):
    """The client went away (killed with its run): so does this module."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)
