# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The checkers of the bootstrap.toml loader (module_utils.config): the error it raises, the bounds, and the
field types every table is built from.

A checker takes ``(value, ctx, key)`` and returns the normalised value or raises :class:`ConfigKeyError`
through ``ctx.fail``, whose message names the file, the key path, what was expected and the valid
environment names. The name rules of the consumers (Kubernetes, kind, AWS, ...) are in config_names; the
tables themselves, one frozen dataclass each, in config_types.
"""

from __future__ import annotations

import os
import re
import string as _string_module

from ansible_collections.krops.platform.plugins.module_utils import contract
from ansible_collections.krops.platform.plugins.module_utils import errors

# Limits that keep a hostile or broken file from exhausting the process.
MAX_FILE_BYTES = 1 << 20
# Nesting the loader reads at most (bootstrap.toml needs 5): checked on the parsed document, so the bound does not
# depend on the interpreter's recursion limit, which a library may raise (cel-python sets 2500)
MAX_DEPTH = 32
MAX_STRING = 1024
MAX_TEXT = 65536
MAX_ITEMS = 256
MAX_TIMEOUT = 7 * 24 * 3600
MAX_TTL = 366 * 24 * 3600

_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
DIGITS = re.compile(r"^[0-9]+$")
_VAR_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")


class ConfigKeyError(errors.ConfigError):
    """bootstrap.toml (or an override) does not describe a valid configuration: ``key`` of ``path``
    is not what was ``expected``."""

    def __init__(self, path, key, expected, got=None, environments=None, detail=None):
        self.path = path
        self.key = key
        self.expected = expected
        self.got = got
        self.environments = list(environments or [])
        parts = ["{}: {}: expected {}".format(path, key or "(top level)", expected)]
        if got is not None:
            parts.append(f", got {contract.describe(got)}")
        if detail:
            parts.append(f"; {detail}")
        if self.environments:
            parts.append(" (valid environments: {})".format(", ".join(self.environments)))
        super().__init__("".join(parts))


def parse_duration(value):
    """Return whole seconds for '40m', '2h', '90s', '1h30m', 90 or '90'; None when invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    if DIGITS.match(text):  # ASCII digits only: "²".isdigit() is true but int("²") fails
        seconds = int(text)
        return seconds if seconds > 0 else None
    match = _DURATION.match(text)
    if not text or not match:
        return None
    hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
    seconds = hours * 3600 + minutes * 60 + secs
    return seconds if seconds > 0 else None


# --- field types -------------------------------------------------------------------
# Each checker takes (value, ctx, key) and returns the normalised value or raises.


class Ctx:
    """Where a value comes from (file or override), the environment names to list, the repository root."""

    def __init__(self, path, environments, root=None):
        self.path = path
        self.environments = environments
        self.root = root
        self.real_root = os.path.realpath(root) if root else None  # resolved once: every repository path is checked

    def fail(self, key, expected, got=None, detail=None):
        raise ConfigKeyError(self.path, key, expected, got, self.environments, detail)


def plain(value, ctx, key, what="a non-empty string", limit=MAX_STRING):
    """A non-empty single-line string of at most ``limit`` characters (the module options' rule, contract.text)."""
    return contract.single_line(value, ctx, key, what, limit)


def string(value, ctx, key):
    return plain(value, ctx, key)


def optional(checker):
    """checker, but the empty string means "not set"."""

    def check(value, ctx, key):
        if value == "":
            return value
        return checker(value, ctx, key)

    return check


def name_rule(pattern, what, limit, source):
    """A name its consumer enforces ``pattern`` and ``limit`` on; the message cites the rule."""

    def check(value, ctx, key):
        plain(value, ctx, key, what, limit=max(limit, 1))
        if len(value) > limit or not pattern.match(value):
            ctx.fail(key, f"{what} ({source})", value)
        return value

    return check


def integer(low, high):
    def check(value, ctx, key):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            ctx.fail(key, "an integer from %d to %d" % (low, high), value)
        return value

    return check


def boolean(value, ctx, key):
    if not isinstance(value, bool):
        ctx.fail(key, "true or false", value)
    return value


def duration_in(high):
    def check(value, ctx, key):
        seconds = parse_duration(value)
        if seconds is None:
            ctx.fail(key, 'a positive duration such as "40m", "2h", "90s" or bare seconds', value)
        if seconds > high:
            ctx.fail(key, "a duration of at most %ds (%dh)" % (high, high // 3600), value)
        return seconds

    return check


duration = duration_in(MAX_TIMEOUT)


def ttl(value, ctx, key):
    """'none' or a positive duration; kept as written (flux computes the expiry from it)."""
    if value == "none":
        return value
    if not isinstance(value, str) or parse_duration(value) is None or DIGITS.match(value.strip()):
        ctx.fail(key, 'a duration such as "24h" or "none"', value)
    if parse_duration(value) > MAX_TTL:
        ctx.fail(key, 'a duration of at most %dh, or "none"' % (MAX_TTL // 3600), value)
    return value


def choice(*choices):
    def check(value, ctx, key):
        if not isinstance(value, str) or value not in choices:
            ctx.fail(key, "one of {}".format(", ".join(c or '""' for c in choices)), value)
        return value

    return check


def matching(pattern, what, limit=MAX_STRING):
    def check(value, ctx, key):
        if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
            ctx.fail(key, what, value)
        return value

    return check


def list_of(item, limit=MAX_ITEMS):
    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, "an array", value)
        if len(value) > limit:
            ctx.fail(key, "an array of at most %d items" % limit, detail="it has %d" % len(value))
        return [item(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]

    return check


def var_map(value, ctx, key):
    if not isinstance(value, dict):
        ctx.fail(key, "a table of UPPER_SNAKE_CASE names to strings", value)
    if len(value) > MAX_ITEMS:
        ctx.fail(key, "a table of at most %d variables" % MAX_ITEMS, detail="it has %d" % len(value))
    for name, text in value.items():
        if not _VAR_NAME.match(name):
            ctx.fail(f"{key}.{name}", "an UPPER_SNAKE_CASE variable name", name)
        if not isinstance(text, str):
            ctx.fail(f"{key}.{name}", "a string", text)
        if len(text) > MAX_TEXT or "\x00" in text:
            ctx.fail(f"{key}.{name}", "a string of at most %d characters without NUL" % MAX_TEXT, text)
    return dict(value)


def _path_text(value, ctx, key, what):
    plain(value, ctx, key, what, limit=4096)
    if "\\" in value:
        ctx.fail(key, f"{what} with '/' separators (no backslash)", value)
    return value


def _inside(ctx, key, value, what):
    """The path, relative to the repository root, must stay inside it (also through symlinks)."""
    parts = value.split("/")
    if value.startswith(("/", "~")) or ".." in parts:
        ctx.fail(key, f"{what} inside the repository: relative, without '..' and not absolute", value)
    if ctx.root:
        root = ctx.real_root
        real = os.path.realpath(os.path.join(root, value))
        if real != root and not real.startswith(root + os.sep):
            ctx.fail(
                key,
                f"{what} inside the repository",
                value,
                detail=f"it resolves to {real} through a symbolic link, outside {root}",
            )
    return value


def repo_path(value, ctx, key):
    """A path of the GitOps repository (a tree or a manifest)."""
    return _inside(ctx, key, _path_text(value, ctx, key, "a repository path"), "a repository path")


def user_path(value, ctx, key):
    """A file of the user (a key, a kubeconfig): absolute or ~ allowed; a relative one stays in the repository."""
    _path_text(value, ctx, key, "a file path")
    if value.startswith(("/", "~")):
        return value
    return _inside(ctx, key, value, "a relative file path")


def pattern(placeholders, rule, samples):
    """A str.format pattern using only ``placeholders``; rendered with samples, it must satisfy ``rule``."""

    def check(value, ctx, key):
        plain(value, ctx, key, "a name pattern", limit=255)
        try:
            fields = [
                (name, spec, conv)
                for _text, name, spec, conv in _string_module.Formatter().parse(value)
                if name is not None
            ]
        except ValueError as exc:
            ctx.fail(
                key,
                "a pattern with balanced braces and only the placeholders {}".format(
                    ", ".join(f"{{{p}}}" for p in placeholders)
                ),
                value,
                detail=str(exc),
            )
        for name, spec, conv in fields:
            if name not in placeholders or spec or conv:
                ctx.fail(
                    key,
                    "a pattern with only the placeholders {} (no format spec or conversion)".format(
                        ", ".join(f"{{{p}}}" for p in placeholders)
                    ),
                    value,
                    detail="unknown placeholder {{{}{}{}}}".format(
                        name, "!" + conv if conv else "", ":" + spec if spec else ""
                    ),
                )
        rendered = value.format(**samples)
        rule(
            rendered,
            ctx,
            "{} (rendered with {})".format(key, ", ".join("{}={}".format(*kv) for kv in sorted(samples.items()))),
        )
        return value

    return check


# A default of REQUIRED makes the key mandatory.
REQUIRED = object()


def table(fields):
    """fields: TOML key -> (checker, default). A misspelt key fails with the known keys listed.

    Returns the checked table as a dict of TOML keys (config_types builds the frozen dataclass from it).
    """

    def check(value, ctx, key):
        if not isinstance(value, dict):
            ctx.fail(key, "a table", value)
        unknown = sorted(set(value) - set(fields))
        if unknown:
            ctx.fail(
                join(key, unknown[0]),
                "one of the known keys: {}".format(", ".join(sorted(fields))),
                detail=f"unknown key {unknown[0][:80]!r}",
            )
        result = {}
        for name, (checker, default) in fields.items():
            if name in value:
                result[name] = checker(value[name], ctx, join(key, name))
            elif default is REQUIRED:
                ctx.fail(join(key, name), "a value (the key is required)")
            elif hasattr(checker, "fields"):  # a missing sub-table gets its own defaults
                result[name] = checker(dict(default or {}), ctx, join(key, name))
            else:
                result[name] = _copy(default)
        return result

    check.fields = fields
    return check


def table_list(fields, limit=64):
    one = table(fields)

    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, f"an array of tables ([[{key}]])", value)
        if len(value) > limit:
            ctx.fail(key, "at most %d tables" % limit, detail="it has %d" % len(value))
        return [one(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]

    return check


def join(key, name):
    return f"{key}.{name}" if key else name


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def distinct_by(field, rule):
    """rule (a list of tables), then no two tables with the same ``field`` (contract: duplicates are refused)."""

    def check(value, ctx, key):
        tables = rule(value, ctx, key)
        contract.unique(lambda v, c, k: v)([t[field] for t in tables], ctx, f"{key}[].{field}")
        return tables

    return check


def not_empty(rule, what):
    """rule, but an empty array is refused: it must not silently mean every {what} of the environment."""

    def check(value, ctx, key):
        if value == []:
            ctx.fail(key, f"at least one {what} (leave the key out for every {what} of the environment)", value)
        return rule(value, ctx, key)

    return check
