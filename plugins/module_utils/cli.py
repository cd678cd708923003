# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Finding and running external binaries (kind, helm, clusterctl, git, age-keygen, ...).

Modelled on community.docker's CLI helper: find the binary once (explicit path, then PATH,
then a few usual folders), probe its version once per process, run it with an argv list
(never a shell), and raise :class:`CliError` carrying the command, rc, stdout and stderr
when it fails. Secrets reach the binary through stdin or the environment, never argv, and
any value listed in ``redact`` is scrubbed from every text the error carries.

Importable without Ansible.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

from ansible_collections.krops.platform.plugins.module_utils import errors

# Folders searched after PATH, as ansible's get_bin_path does.
_EXTRA_DIRS = (
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
    os.path.expanduser("~/.local/bin"),
    os.path.expanduser("~/go/bin"),
)

_VERSION = re.compile(r"v?(\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.-]+)?)")

_version_cache = {}


class CliError(errors.ToolError):
    """An external command failed; carries command, rc, stdout and stderr (also as ``result``, for fail_json)."""

    def __init__(self, message, command=None, rc=None, stdout="", stderr=""):
        super().__init__(message)
        self.command = command
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.result = self.as_dict()

    def as_dict(self):
        """The fields a module passes to fail_json."""
        return {"cmd": self.command, "rc": self.rc, "stdout": self.stdout, "stderr": self.stderr}


class ToolMissing(CliError):
    """A binary was not found (or an explicit path is not executable)."""

    def __init__(self, name, message):
        super().__init__(message)
        self.name = name
        self.result = {}  # nothing ran


def find_binary(name, explicit=None, extra_dirs=_EXTRA_DIRS, environ=None):
    """Absolute path of binary ``name``; ``explicit`` (a path or a bare name) wins.

    Raises ToolMissing naming the tool and where it looked.
    """
    environ = os.environ if environ is None else environ
    search_path = environ.get("PATH", "")
    if explicit:
        explicit = os.path.expanduser(explicit)
        if os.sep in explicit:
            if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
                return os.path.abspath(explicit)
            raise ToolMissing(name, f"{name} binary {explicit} does not exist or is not executable")
        name = explicit
    found = shutil.which(name, path=search_path)
    if found:
        return os.path.abspath(found)
    for folder in extra_dirs or ():
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise ToolMissing(
        name,
        "{} was not found on PATH ({}) nor in {}; install it or give its path".format(
            name, search_path or "empty", ", ".join(extra_dirs or ()) or "no other folder"
        ),
    )


def missing_tools(names, environ=None):
    """(found {name: path}, missing [names]) for a list of tool names, every one checked."""
    found, missing = {}, []
    for name in names:
        try:
            found[name] = find_binary(name, environ=environ)
        except ToolMissing:
            missing.append(name)
    return found, missing


def format_command(argv):
    return " ".join(shlex.quote(str(part)) for part in argv)


def _scrub(text, redact):
    for secret in redact or ():
        if secret:
            text = text.replace(secret, "********")
    return text


def _tail(text, lines=20):
    parts = (text or "").strip().splitlines()
    return "\n".join(parts[-lines:])


class CliResult:
    def __init__(self, command, rc, stdout, stderr):
        self.command = command
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


class Cli:
    """One external tool: ``Cli('kind', binary=params['kind_binary']).run(['get', 'clusters'])``."""

    def __init__(self, name, binary=None, version_args=("version",), environ=None, timeout=None):
        self.name = name
        self._explicit = binary
        self._path = None
        self.version_args = tuple(version_args)
        self.environ = dict(os.environ if environ is None else environ)
        self.timeout = timeout

    @property
    def path(self):
        if self._path is None:
            self._path = find_binary(self.name, self._explicit, environ=self.environ)
        return self._path

    def version(self):
        """The tool's version string (e.g. '0.27.0'), probed once per process and binary."""
        path = self.path
        if path not in _version_cache:
            result = self.run(list(self.version_args), check=False)
            text = (result.stdout or "") + " " + (result.stderr or "")
            match = _VERSION.search(text)
            _version_cache[path] = match.group(1) if match else (text.strip().splitlines() or ["unknown"])[0]
        return _version_cache[path]

    def run(self, args, stdin=None, env=None, check=True, timeout=None, cwd=None, redact=None):
        """Run the tool with argv ``args``; stdin text/bytes and extra env carry secrets.

        Returns CliResult; with check=True a non-zero exit raises CliError whose message
        names the command, the exit code and the end of stderr (secrets in ``redact``
        replaced by ********).
        """
        argv = [self.path] + [str(a) for a in args]
        shown = _scrub(format_command([self.name] + [str(a) for a in args]), redact)
        full_env = dict(self.environ)
        full_env.update({k: str(v) for k, v in (env or {}).items() if v is not None})
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        try:
            # module_utils.cli runs outside AnsibleModule too (lookups, tests): no run_command here.
            proc = subprocess.run(  # pylint: disable=ansible-bad-function
                argv,
                input=data,
                capture_output=True,
                env=full_env,
                cwd=cwd,
                timeout=timeout or self.timeout,
                check=False,
                stdin=None if data is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise CliError(
                f"`{shown}` did not finish within {exc.timeout}s",
                command=shown,
                rc=None,
                stdout=_scrub(_decode(exc.stdout), redact),
                stderr=_scrub(_decode(exc.stderr), redact),
            )
        except OSError as exc:
            raise CliError(f"cannot run `{shown}`: {exc}", command=shown)
        stdout = _scrub(_decode(proc.stdout), redact)
        stderr = _scrub(_decode(proc.stderr), redact)
        if check and proc.returncode != 0:
            detail = _tail(stderr) or _tail(stdout) or "no output"
            raise CliError(
                "`%s` failed with exit code %d: %s" % (shown, proc.returncode, detail),
                command=shown,
                rc=proc.returncode,
                stdout=stdout,
                stderr=stderr,
            )
        return CliResult(shown, proc.returncode, stdout, stderr)


def _decode(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data
