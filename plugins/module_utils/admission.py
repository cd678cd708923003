# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Admission webhooks of the providers the trees install, as a registry.

The schemas and CEL rules (validate_schema, cel) are what the API server checks on its own. The
providers add admission webhooks: a mutating one that defaults, then a validating one that may deny.
Both live in Go code, not in the CRDs, so a tree can pass every schema and still be refused. This
module ports them, one ``Rule`` per upstream check, each with the exact message and its source: the checks
are in admission_checks.py, the defaulting webhooks and the table of kinds (``WEBHOOKS``) in
admission_webhooks.py, the rules (``RULES``) in admission_rules.py; this file is the engine.

``review(obj)`` does what the API server does with an object on create: run the kind's defaulting
webhook, then its validating webhook, and return the denial (or None). The denial's text is the
apiserver's: ``admission webhook "<name>" denied the request: <the webhook's message>``
(k8s.io/apiserver v0.35.4 ``pkg/admission/plugin/webhook/errors/statuserror.go`` ToStatusErr). The code
is 422 when the webhook returned an apierrors.NewInvalid and 403 for any other error
(controller-runtime v0.23.3 ``pkg/webhook/admission/validator_custom.go``: an APIStatus error keeps its
status, anything else is ``Denied``, which is 403 Forbidden in ``response.go`` ValidationResponse).

Feature gates: each rule that depends on one reads ``gates`` (owner, gate) -> bool, which starts from
the upstream defaults (``GATE_DEFAULTS``) and takes the tree's ``spec.manager.featureGates``.

Only create-time rules are ported (Flux creates the objects); update-only rules (immutability, no
downgrades) are not. docs/upstream-facts.md "Admission webhooks" lists the kinds, the rules and the
kinds that have no create rule.
"""

from __future__ import annotations

import copy
import json

from ansible_collections.krops.platform.plugins.module_utils.admission_checks import (
    GATE_OWNERS,
    get_path,
    object_name,
    selector_detail,
)
from ansible_collections.krops.platform.plugins.module_utils.admission_rules import RULES
from ansible_collections.krops.platform.plugins.module_utils.admission_webhooks import WEBHOOKS


def go_value(value):
    """How field.Error prints a bad value: %q for strings, %v for numbers and booleans (apimachinery
    pkg/util/validation/field/errors.go ErrorBody); other values as compact JSON (Go prints %#v)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldError:
    """A field.Error: ``<field>: <Type>[: <value>]: <detail>`` (Required and Forbidden print no value)."""

    TYPES = {"Invalid": "Invalid value", "Required": "Required value", "Forbidden": "Forbidden"}
    REASONS = {"Invalid": "FieldValueInvalid", "Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden"}

    def __init__(self, type_, field, bad_value, detail):
        self.type, self.field, self.bad_value, self.detail = type_, field, bad_value, detail

    def body(self):
        text = self.TYPES[self.type]
        if self.type == "Invalid":
            text += ": " + go_value(self.bad_value)
        return f"{text}: {self.detail}"

    def __str__(self):
        return f"{self.field}: {self.body()}"


class Denial:
    """What the API server answers: code, reason, message, and the webhook's field errors."""

    def __init__(self, webhook, code, reason, message, errors, rules):
        self.webhook, self.code, self.reason, self.message, self.errors, self.rules = (
            webhook,
            code,
            reason,
            message,
            errors,
            rules,
        )

    def status(self, group, kind, name):
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.code == 422:
            body["details"] = {
                "name": name,
                "group": group,
                "kind": kind,
                "causes": [
                    {"reason": FieldError.REASONS[e.type], "message": e.body(), "field": e.field} for e in self.errors
                ],
            }
        return body


def _error(rule, obj, field, found):
    """The field.Error of one violation. A check yields the bad value, or (bad value, detail) when the
    detail depends on the object."""
    if isinstance(found, tuple):
        bad, detail = found
    else:
        bad, detail = found, rule.detail
        if "{selector}" in detail:
            detail = selector_detail(obj)
        elif "{value}" in detail:
            detail = detail.format(value=found)
    return FieldError(rule.type, field, bad, detail)


def default(obj):
    """The object after its kind's defaulting webhook (a copy; the input is not changed)."""
    obj = copy.deepcopy(obj)
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    hook = WEBHOOKS.get((group, obj.get("kind")))
    if hook and hook[0]:
        hook[0](obj)
    return obj


def review(obj, gates=None):
    """Default, then validate ``obj`` as its kind's webhooks do on create. Returns a Denial or None."""
    gates = dict(gates or {})
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = obj.get("kind")
    hook = WEBHOOKS.get((group, kind))
    if not hook or not hook[1]:
        return None
    obj = default(obj)
    name = object_name(obj)
    errors, fired = [], []
    for rule in RULES:
        if (rule.group, rule.kind) != (group, kind):
            continue
        try:
            found_all = list(rule.check(obj, gates))
        except (TypeError, AttributeError, ValueError):
            continue  # a value of the wrong type: the schema refuses it before any webhook runs
        for field, found in found_all:
            if rule.plain:
                err = _error(rule, obj, field, found)
                text = err.detail if rule.type == "Plain" else str(err)
                return Denial(
                    hook[1], 403, "Forbidden", f'admission webhook "{hook[1]}" denied the request: {text}', [], [rule]
                )
            errors.append(_error(rule, obj, field, found))
            fired.append(rule)
    if not errors:
        return None
    texts = []
    for err in errors:
        if str(err) not in texts:
            texts.append(str(err))
    aggregate = texts[0] if len(texts) == 1 else "[{}]".format(", ".join(texts))
    message = f'{kind}.{group} "{name}" is invalid: {aggregate}'
    return Denial(
        hook[1], 422, "Invalid", f'admission webhook "{hook[1]}" denied the request: {message}', errors, fired
    )


def gates_from(objects):
    """Feature gates the tree sets on its operator providers (spec.manager.featureGates), by owner."""
    gates = {}
    for obj in objects:
        owner = GATE_OWNERS.get((obj.get("kind"), object_name(obj)))
        if not owner or not str(obj.get("apiVersion", "")).startswith("operator.cluster.x-k8s.io/"):
            continue
        for gate, value in (get_path(obj, "spec", "manager", "featureGates") or {}).items():
            gates[(owner, gate)] = bool(value)
    return gates


def registry():
    """The rules as data (docs and tests read this)."""
    return [rule.as_dict() for rule in RULES]
