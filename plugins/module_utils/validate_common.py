# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What validate's engine (validate.py) and its rule files (validate_<area>.py) share.

Object labels, API groups, CRD plurals and repository paths, and the run values validate substitutes to
see a tree as it is during a run. Nothing here reports a finding.
"""

from __future__ import annotations

import os

try:
    import yaml

    YAML_ERRORS = (yaml.YAMLError,)
except ImportError:  # PyYAML comes with ansible-core; only bare sanity environments lack it
    yaml = None
    YAML_ERRORS = ()

from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import validate_schema

FLUX_KS = "kustomize.toolkit.fluxcd.io"
# Kinds whose CRD plural is not the English rule below (the CRD's spec.names.plural):
# Hardware -> hardware (tinkerbell/tinkerbell crd/bases/v1alpha1/tinkerbell.org_hardware.yaml @ v0.25.0).
IRREGULAR_PLURALS = {"hardware": "hardware"}
# What the krops-run ConfigMap holds during a run (flux_handoff writes it; the defaults in the tree are
# only used without it): the GCP label check substitutes these too, so a value valid only by its
# default is caught.
SAMPLE_RUN_TAGS = {
    "KROPS_RUN_ID": "gcp-20261201-120000",
    "KROPS_REVISION": "main@sha1:0123456789abcdef0123456789abcdef01234567",
    "KROPS_EXPIRES_AT": "2026-12-02T12:00:00Z",
    "KROPS_RUN_KIND": "manual",
}
SAMPLE_RUN_TAGS.update(ownership.gcp_run_labels(SAMPLE_RUN_TAGS))


class ValidateError(errors.ValidationError):
    """validate could not run (bad path, bad bootstrap.toml, unusable schema location); validate.ValidateError."""


def object_id(obj):
    """Kind/namespace/name of an object (Kind/name when it has no namespace): a finding's object."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return "{}/{}{}".format(obj.get("kind", "?"), f"{ns}/" if ns else "", meta.get("name", "?"))


def flag(env, item, rule, message):
    """Add a finding about the rendered object ``item``, named by its file and object_id."""
    env.add(item.file, object_id(item.obj), rule, message)


def group_of(api_version):
    """The API group of an apiVersion ("" for the core group)."""
    return validate_schema.split_api_version(api_version)[0]


def plural(kind):
    """The CRD plural (spec.names.plural) of a kind."""
    lower = kind.lower()
    if lower in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[lower]
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


def norm_path(path):
    """A repository path as Flux reads spec.path (relative to the root, ./ and a leading / dropped)."""
    return os.path.normpath(str(path or ".").lstrip("/"))


def flux_kustomizations(env):
    """The Flux Kustomizations of an environment."""
    return [i for i in env.items if i.kind == "Kustomization" and i.group == FLUX_KS]


def label(item):
    """A finding's object for an item: its id, and how it came about when kustomize did not render it."""
    return object_id(item.obj) if not item.virtual else f"{object_id(item.obj)} ({item.origin})"
