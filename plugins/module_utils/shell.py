# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The one module shell: argument parsing, the steps of a run, and failure reporting.

A module is ``shell.run(NAME, argument_spec(), body)`` where ``body(module, step)`` returns
the result dict. The shell applies the module's input contract (contract.check, its row of options.OPTIONS)
before the body, so before any file or network call; a stepped module passes ``resume`` (the argument spec of
its action plugin's resume state, module_utils.stepping), read into the parameters before the contract.
Expected failures (errors.KropsError and its subclasses) become ``fail_json(msg, **error.result)``; anything else becomes a clear failure naming the module
and the step it was in (``step("exporting the kubeconfig")``), with the traceback in
``exception`` so that ansible-playbook shows it only at -vvv. No module repeats an except
ladder.

A module that words its failures (a prefix naming what it acted on, a hint for one area)
passes ``wording``: a table {KropsError subclass: template}. The template of the most
specific class of the error is used: a ``str.format`` template with ``error`` and ``params``
(the module parameters), or a callable ``(error, params) -> str``. Errors of other classes
keep their own message.

A module whose failures carry fixed keys (capi_pivot's ``failed_phase``) passes ``details``: a
table {KropsError subclass: dict or callable ``(error, params) -> dict``}; the entry of the most
specific class of the error is added to the error's own result. So no module catches a typed
error to raise another with the same message: the shell is the one place that turns a krops
error into fail_json.

A foreign library's error that reaches a body (a raw kubernetes ``ApiException``) is translated by the shell
too: ``translate`` is a table {exception class: callable ``(error, params) -> KropsError``}, so a body never
catches an error to raise another. A module that writes a file it is given (``dest``) writes it through
``write_output``, which names the option when the file cannot be written.
"""

from __future__ import annotations

import atexit
import gc
import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.krops.platform.plugins.module_utils import contract, errors, stepping


class Step:
    """The step a module is in; the message of an unexpected failure names it."""

    def __init__(self, name="starting"):
        self.name = name

    def __call__(self, name):
        self.name = name
        return self


def failure_details(exc, extra=None):
    """fail_json keyword arguments of an expected error (its partial result and ``extra``, without reserved keys)."""
    details = dict(exc.result or {}, **(extra or {}))
    for key in ("failed", "msg", "exception", "changed"):
        details.pop(key, None)
    details["changed"] = bool((exc.result or {}).get("changed"))
    return details


def unexpected_message(name, step, exc):
    return (
        f"{name} failed unexpectedly while {step.name}: {type(exc).__name__}: {exc}. This is a krops defect, not a problem with your input; "
        "run with -vvv for the traceback and report it"
    )


def positive(params, names, unit=""):
    """errors.ConfigError naming the first of the space-separated ``names`` given below 1: a timeout, interval
    or count of 0 or less would end a wait at once, never, or check nothing."""
    for name in names.split():
        value = params.get(name)
        if value is not None and value < 1:
            raise errors.ConfigError(f"{name} must be at least 1{unit}, got {value}")


def options(params, option_names, /, **renamed):
    """Keyword arguments of a verb from module parameters: each of the space-separated ``option_names`` as is,
    and ``renamed`` {verb argument: option} (so that a body does not spell ``x=params["x"]`` once per option)."""
    out = {name: params[name] for name in option_names.split()}
    out.update((argument, params[option]) for argument, option in renamed.items())
    return out


def _entry(table, exc):
    """The entry of ``table`` for the most specific class of ``exc`` (None when it has none)."""
    for cls in type(exc).__mro__:
        entry = (table or {}).get(cls)
        if entry is not None:
            return entry
    return None


def worded(wording, exc, params):
    """The message of expected error ``exc``: the ``wording`` entry of its most specific class, else str(exc)."""
    template = _entry(wording, exc)
    if template is None:
        return str(exc)
    return template(exc, params) if callable(template) else template.format(error=exc, params=params)


def detailed(details, exc, params):
    """The keys the ``details`` entry of the most specific class of ``exc`` adds to its result ({} without one)."""
    extra = _entry(details, exc)
    return dict((extra(exc, params) if callable(extra) else extra) or {})


def write_output(option, path, data, check_mode=False):
    """Write bytes ``data`` to the file ``path`` given by ``option`` when its content differs (through a temporary
    file beside it, so a reader never sees half of it); True when it changed (or would, in check mode). A file that
    cannot be written is an errors.ConfigError naming the option."""
    current = None
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            current = handle.read()
    changed = current != data
    if changed and not check_mode:
        folder = os.path.dirname(os.path.abspath(path))
        temporary = None
        try:
            os.makedirs(folder, exist_ok=True)
            # a new file of a random name (O_EXCL): a symlink planted at a predictable temporary name is never followed
            descriptor, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            umask = os.umask(0)  # mkstemp makes it 0600: give it the mode open() would have
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, path)
        except OSError as exc:
            if temporary and os.path.exists(temporary):
                os.unlink(temporary)
            raise errors.ConfigError(f"option {option}: cannot write {path}: {exc.strerror}") from None
    return changed


def translated(translate, exc, params):
    """The KropsError the ``translate`` entry of the most specific class of foreign error ``exc`` makes (None
    without one)."""
    make = _entry(translate, exc)
    return None if make is None else make(exc, params)


def run(
    name,
    argument_spec,
    body,
    supports_check_mode=True,
    requires=None,
    wording=None,
    details=None,
    resume=None,
    secret_env=(),
    translate=None,
    **module_kwargs,
):
    """Run a krops module. ``requires``: [(library name, has_it, import error)] checked before the body;
    ``secret_env``: environment variables that hold secrets the module or an SDK reads, whose values are masked in
    the result, messages and warnings like no_log options; ``resume``, ``wording``, ``details`` and ``translate``:
    see the module docstring."""
    # The process ends with the result. Python's last garbage collections would walk every object the kubernetes
    # client, boto3 and ansible made (about 80 ms a module call here, between the answer and the task's end);
    # frozen objects are skipped, and the OS takes back the memory. Every file is closed before the exit.
    atexit.register(gc.freeze)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=supports_check_mode, **module_kwargs)
    module.no_log_values.update(os.environ[var] for var in secret_env if os.environ.get(var))
    for library, present, error in requires or ():
        if not present:
            module.fail_json(msg=missing_required_lib(library), exception=str(error))
    step = Step()
    try:
        if resume is not None:
            module.params.update(stepping.read(resume))
        contract.check(name.rsplit(".", 1)[-1], module.params)  # the input contract first
        result = body(module, step)
    except errors.KropsError as exc:
        _fail(module, exc, wording, details)
    except Exception as exc:  # pylint: disable=broad-except  # the shell is the one place that catches everything
        known = translated(translate, exc, module.params)
        if known is not None:
            _fail(module, known, wording, details)
        else:
            module.fail_json(
                msg=unexpected_message(name, step, exc), exception=traceback.format_exc(), failed_step=step.name
            )
    module.exit_json(**result)


def _fail(module, exc, wording, details):
    module.fail_json(
        msg=worded(wording, exc, module.params), **failure_details(exc, detailed(details, exc, module.params))
    )
