"""krops' own validators beside the emulated API server's verdicts: differentials, never judges.

tests/substrate/strict_api.py judges every write with code of its own (core_schemas.py for built-in kinds,
cel_independent.py for CEL rules) and imports none of krops'. The test run (tests/conftest.py, ``install()``) adds
these checks to its CORE_SCHEMA_CHECKS and CEL_CHECKS: each runs krops' validator on the same object, and when the
two judge it differently the write is refused (ApiError 500) and the case is kept in SCHEMA_DISAGREEMENTS or
CEL_DISAGREEMENTS. So a bug in krops' validators fails the write it meets, and a verdict is never krops' alone.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel
from ansible_collections.krops.platform.plugins.module_utils import validate_schema
from tests.substrate import cel_independent, strict_api

SCHEMA_DISAGREEMENTS = []  # (apiVersion kind, krops' errors): must stay empty
CEL_DISAGREEMENTS = []  # (kind, name, path, rule, krops' outcome, cel-python's): must stay empty
_STORE = []  # krops' SchemaStore of the vendored schemas, made on first use


def _error_keys(errors):
    return sorted((tuple(map(str, e.absolute_path)), e.validator) for e in errors)


def core_schema(api_version, kind, obj, errors):
    """krops' validate_schema on a built-in kind: it must have a schema exactly when the emulator has one, and find
    the same errors (path and keyword)."""
    if not _STORE:
        _STORE.append(validate_schema.SchemaStore(location=str(strict_api.SCHEMA_DIR)))
    try:
        product = _STORE[0].validator(api_version, kind)
    except Exception:  # no bundled schema for this built-in kind
        product = None
    if (errors is None) != (product is None):
        raise strict_api.ApiError(
            500, "InternalError", f"the emulator's schema loaders disagree on {api_version} {kind}"
        )
    if errors is None:
        return
    theirs = _error_keys(product.iter_errors(obj))
    if _error_keys(errors) != theirs:
        SCHEMA_DISAGREEMENTS.append((f"{api_version} {kind}", theirs))
        raise strict_api.ApiError(
            500, "InternalError", f"the emulator's two schema walks disagree on {api_version} {kind}"
        )


def cel(obj, schema, verdicts):
    """krops' evaluator (plugins/module_utils/cel.py, the one validate uses) on the same rules: the engines must give
    the same outcome where both run, and krops' walk must reach no rule the emulator's walk did not."""
    results = krops_cel.evaluate(obj, schema)
    meta = obj.get("metadata") or {}
    found = cel_independent.disagreements(obj, schema, results, mine={key: v.outcome for key, v in verdicts.items()})
    if found:
        CEL_DISAGREEMENTS.extend((obj.get("kind"), meta.get("name"), *f) for f in found)
        raise strict_api.ApiError(500, "InternalError", f"the emulator's two CEL engines disagree: {found}")
    unwalked = sorted(
        {(r.path, r.rule) for r in results if r.outcome == krops_cel.VIOLATED and (r.path, r.rule) not in verdicts}
    )
    if unwalked:
        CEL_DISAGREEMENTS.extend(
            (obj.get("kind"), meta.get("name"), path, rule, "violated", None) for path, rule in unwalked
        )
        raise strict_api.ApiError(
            500, "InternalError", f"the emulator's two CEL walks disagree on where rules run: {unwalked}"
        )


def install():
    """Add both checks to strict_api's lists (once)."""
    for checks, check in ((strict_api.CORE_SCHEMA_CHECKS, core_schema), (strict_api.CEL_CHECKS, cel)):
        if check not in checks:
            checks.append(check)
