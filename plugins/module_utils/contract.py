# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The one input contract: rules written once, used by the loader (config.py) and by every module's options.

A rule is a checker ``(value, ctx, key) -> normalised value`` that calls ``ctx.fail(key, expected, got,
detail)`` on bad input: the loader's checkers have this shape, so its named rules (DNS labels, kind and
EKS names, git branches, ...) are the modules' rules too, and the primitives below (URLs, finite
numbers, unique lists, URL path segments, confined paths) serve both. ``check(module, params)`` applies
the module's row of OPTIONS to its parameters before the module does anything else, so every check
runs before any network call; a failure names the option, what is expected and, unless it is a
secret, what was given (docs/configuration.md, Module options).

Rules of the contract:
- names by their consumer's rules (the loader's named checkers);
- URLs: https; http only to a loopback host, or where the option documents it; never file: or others;
- identifiers that reach a URL path: by pattern, so never '/', '..' or anything needing escaping;
- numbers finite and in range; list entries unique;
- paths confined by realpath; nothing written into the GitOps tree.

Importable without Ansible.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import errors

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LOOPBACK_NAMES = ("localhost",)


class ContractError(errors.ConfigError):
    """A module option breaks the contract; the message names the option."""

    def __init__(self, module, key, expected, got=None, detail=None, secret=False):
        self.key = key
        self.module = module
        parts = [f"option {key}: expected {expected}"]
        if got is not None and not secret:
            parts.append(f", got {describe(got)}")
        if detail:
            parts.append(f"; {detail}")
        super().__init__("".join(parts))


def describe(value):
    """A short, printable rendering of a bad value (never longer than 80 characters)."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (dict, list)):
        return "a table" if isinstance(value, dict) else "an array"
    if isinstance(value, str) and len(value) > 80:
        return "%s... (%d characters)" % (repr(value[:60]), len(value))
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class OptionCtx:
    """The ctx of a module's options: fail() raises ContractError naming the option; params are all options."""

    def __init__(self, module, params, secret=()):
        self.module = module
        self.params = params
        self.secret = set(secret)
        self.root = None
        self.environments = []

    def fail(self, key, expected, got=None, detail=None):
        raise ContractError(self.module, key, expected, got, detail, secret=key.split("[")[0] in self.secret)


# --- primitives -----------------------------------------------------------------------------


def single_line(value, ctx, key, what="a non-empty string", limit=1024):
    """A non-empty single-line string of at most ``limit`` characters, without control characters (the loader's
    config_schema.plain is this check too)."""
    if not isinstance(value, str) or not value.strip():
        ctx.fail(key, what, value)
    if len(value) > limit:
        ctx.fail(key, "%s of at most %d characters" % (what, limit), value)
    if CONTROL.search(value):
        ctx.fail(key, f"{what} without control characters (NUL, newline, tab...)", value)
    return value


def text(limit=1024, what="a non-empty string"):
    """A non-empty single-line string without control characters."""

    def check(value, ctx, key):
        return single_line(value, ctx, key, what, limit)

    return check


def _loopback(host):
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url(http="loopback", what="an https:// URL"):
    """An absolute URL with a host. ``http``: 'loopback' (http only to 127.0.0.0/8, ::1, localhost), 'any'
    (documented: a registry or mirror on the local network), or 'never'. Returns it without a trailing '/'."""

    def check(value, ctx, key):
        if not isinstance(value, str) or not value:
            ctx.fail(key, what, value)
        if len(value) > 2048 or CONTROL.search(value) or any(c.isspace() for c in value):
            ctx.fail(key, f"{what} of at most 2048 characters without spaces or control characters", value)
        try:
            parts = urllib.parse.urlsplit(value)
            host = parts.hostname
            if parts.port is not None and not 0 < parts.port < 65536:
                raise ValueError("Port out of range 1-65535")
        except ValueError as exc:
            ctx.fail(key, what, value, detail=str(exc))
        scheme = parts.scheme.lower()
        if scheme not in ("https", "http"):
            ctx.fail(
                key,
                what,
                value,
                detail="the scheme {}: is never accepted (only {})".format(
                    scheme or "(none)", "https" if http == "never" else "https or http"
                ),
            )
        if not host:
            ctx.fail(key, what, value, detail="it names no host")
        if parts.username or parts.password:
            ctx.fail(key, f"{what} without credentials", None, detail="it carries a user name or password before '@'")
        if parts.query or parts.fragment:
            ctx.fail(key, f"{what} without a query or fragment", value)
        if scheme == "http" and not (http == "any" or (http == "loopback" and _loopback(host))):
            ctx.fail(
                key,
                what,
                value,
                detail="http:// is accepted only to a loopback address (127.0.0.1, ::1, localhost)"
                if http == "loopback"
                else "http:// is never accepted here",
            )
        return value.rstrip("/")

    return check


def segment(pattern, what):
    """An identifier that becomes one URL path segment: the pattern must match and exclude '/', '..' and '%'."""

    def check(value, ctx, key):
        if not isinstance(value, str) or not pattern.match(value) or "/" in value or ".." in value or "%" in value:
            ctx.fail(key, what, value)
        return value

    return check


def number(low, high, integer=False, what=None):
    """A finite number from low to high (never NaN or infinity; never a boolean)."""

    def check(value, ctx, key):
        kind = "an integer" if integer else "a number"
        expected = what or f"{kind} from {low} to {high}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            ctx.fail(key, expected, value)
        if isinstance(value, float) and not math.isfinite(value):
            ctx.fail(key, f"a finite {expected.split(' ', 1)[1] if expected.startswith('a ') else expected}", value)
        if integer and not float(value).is_integer():
            ctx.fail(key, expected, value)
        if not low <= value <= high:
            ctx.fail(key, expected, value)
        return int(value) if integer else value

    return check


def unique(item, limit=256):
    """A list of distinct entries, each checked by ``item``."""

    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, "an array", value)
        if len(value) > limit:
            ctx.fail(key, "an array of at most %d items" % limit, detail="it has %d" % len(value))
        out = [item(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]
        seen = set()
        for i, entry in enumerate(out):
            mark = repr(entry)
            if mark in seen:
                ctx.fail("%s[%d]" % (key, i), "distinct entries", entry, detail="it repeats an earlier entry")
            seen.add(mark)
        return out

    return check


def within(path, root):
    """Whether path, by realpath, is root or inside it."""
    top = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == top or real.startswith(top + os.sep)


def directory(what="an existing directory"):
    def check(value, ctx, key):
        text(4096, what)(value, ctx, key)
        if not os.path.isdir(os.path.expanduser(value)):
            ctx.fail(key, what, value)
        return value

    return check


def confined(root_option, default_root=None, what="a directory inside the repository"):
    """A path relative to (or inside) the directory of option ``root_option`` that stays inside it by realpath:
    a symbolic link out of the repository is refused, so nothing outside it is read, packed or pushed."""

    def check(value, ctx, key):
        text(4096, "a path")(value, ctx, key)
        root = ctx.params.get(root_option) or default_root or os.getcwd()
        root = os.path.abspath(os.path.expanduser(root))
        full = os.path.join(root, os.path.expanduser(value))
        if not within(full, root):
            ctx.fail(
                key,
                what,
                value,
                detail=f"it resolves to {os.path.realpath(full)}, outside {os.path.realpath(root)} "
                "(a symbolic link or '..'); nothing outside the repository is read",
            )
        return value

    return check


def _creatable(path):
    """The nearest existing ancestor of path's folder, when it is a directory (the folders can be created), else None."""
    folder = os.path.dirname(path)
    while folder and not os.path.lexists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder if os.path.isdir(folder) else None


def outside(root_option, paths_option, what="a file path outside the GitOps tree"):
    """A file to write: its folder must exist or be creatable, and by realpath it must not lie inside any of the
    directories of ``paths_option`` (relative to ``root_option``): the tree Flux reconciles."""

    def check(value, ctx, key):
        writable_file(what)(value, ctx, key)
        path = os.path.abspath(os.path.expanduser(value))
        root = os.path.abspath(os.path.expanduser(ctx.params.get(root_option) or os.getcwd()))
        for tree in ctx.params.get(paths_option) or []:
            top = os.path.join(root, os.path.expanduser(str(tree)))
            if within(path, top):
                ctx.fail(
                    key,
                    what,
                    value,
                    detail=f"it lies inside {os.path.realpath(top)} ({paths_option}), which Flux reconciles; "
                    "write it elsewhere (e.g. airgap/build/)",
                )
        return value

    return check


def writable_file(what="a file path"):
    """A file to write whose folder exists or can be created (no part of it is a file)."""

    def check(value, ctx, key):
        text(4096, "a file path")(value, ctx, key)
        path = os.path.abspath(os.path.expanduser(value))
        if _creatable(path) is None:
            ctx.fail(key, what, value, detail="a part of its folder is a file, not a directory")
        if os.path.isdir(path):
            ctx.fail(key, f"{what}, not a directory", value)
        return value

    return check


def choice_or(rule, *literal):
    """``rule``, or one of the literal values."""

    def check(value, ctx, key):
        return value if value in literal else rule(value, ctx, key)

    return check


def caller_account(module, given, actual):
    """Refuse an account_id that is not the account of the credentials (STS GetCallerIdentity): a sweep must
    never act, or report, in another account than the one it was pointed at."""
    if given and actual and str(given) != str(actual):
        raise ContractError(
            module,
            "account_id",
            f"the account of the credentials ({actual}, sts get-caller-identity)",
            given,
            detail="the credentials belong to another account; fix the credentials or account_id",
        )


# --- the modules' options -------------------------------------------------------------------


def check(module, params, secret=()):
    """Apply module's row of OPTIONS to params (in place, normalising); raise ContractError on the first bad one.
    Options that are unset (None) are not checked: the module's own defaults apply."""
    from ansible_collections.krops.platform.plugins.module_utils import options  # pylint: disable=import-outside-toplevel

    rules = options.OPTIONS[module]
    ctx = OptionCtx(module, params, secret)
    for key, rule in rules.items():
        if "." in key:  # a sub-option: parent.child, in a dict or each dict of a list
            parent, child = key.split(".", 1)
            holder = params.get(parent)
            holders = holder if isinstance(holder, list) else [holder] if isinstance(holder, dict) else []
            for i, entry in enumerate(holders):
                if isinstance(entry, dict) and entry.get(child) is not None:
                    where = f"{parent}[{i}].{child}" if isinstance(holder, list) else key
                    entry[child] = rule(entry[child], ctx, where)
            continue
        if params.get(key) is not None:
            params[key] = rule(params[key], ctx, key)
    return params
