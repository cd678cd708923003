# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Environment profiles: what each platform needs, keyed on capabilities, not on names.

An environment of bootstrap.toml names its platform (``kind = "aws"``, also spelt
``platform = "aws"``; in code it is the *platform*, so that it does not collide with kind
the tool nor with an object's kind). Code never compares platform names: it asks the
profile (``profiles.of(env).local_registry``). Adding a platform is one entry in
PROFILES plus that platform's own module and task file; a cloud whose rows file the generic teardown runs
(``cloud_rows``, krops.platform.cloud_teardown) is one entry and that rows file (docs/extending.md).

Roles read a profile through the lookup: ``lookup('krops.platform.bootstrap_config',
'profile')`` (the selected environment) or ``'profiles.<environment>'``; the keys are the
field names with dashes (``local-registry``).

Importable without Ansible.
"""

from __future__ import annotations

import re
from collections import namedtuple

FIELDS = (
    # Human name of the platform (also the value of `kind`/`platform` in bootstrap.toml).
    "platform",
    # The bootstrap starts a local OCI registry and Flux syncs from it; the pivot and the
    # kind deletion check that it serves (GET /v2/).
    "local_registry",
    # The exported management kubeconfig's server is rewritten to the published port of
    # the <mgmt-cluster>-lb container (CAPD's load balancer on the Docker host).
    "lb_rewrite",
    # Credentials the pivot copies to the management cluster by a dedicated step
    # (None: the environment's pivot-manifests carry them).
    "pivot_credentials",
    # The cloud whose API the teardown sweeps (None: no cloud side), and its teardown step
    # (also: the AWS sweep, ownership checks and preflight's quota check act on cloud "aws").
    "cloud",
    "cloud_teardown_step",
    # What of the cloud side must go before the workload Clusters are deleted (None: nothing); the
    # cloud teardown step then runs first with phase before-clusters (gcp: Cloud SQL and private
    # services access hold the workload VPC, which CAPG deletes with its Cluster).
    "cloud_teardown_before_clusters",
    # The cloud's rows file when the generic module krops.platform.cloud_teardown runs its teardown step and orphan
    # report (None: the step has a module and task file of its own, as aws, azure and gcp). It is a function that
    # imports the rows file and returns it: imported by name, so AnsiballZ packs it (ansible-core's recursive_finder
    # reads imports, never a string), and inside a function, since a rows file imports steps, which imports
    # ownership, which imports this file. Roles see the function's name (as_dict), by convention the file's.
    "cloud_rows",
    # Teardown releases bare-metal Hardware back to the Tinkerbell pool; the management cluster
    # on that Hardware stays after the teardown (and so does its kubeconfig context).
    "hardware_release",
    # The clusters are local Docker containers: teardown removes them by their kind/CAPD label
    # (even with no controller host answering) and waits the local timeout for workload Clusters.
    "local_containers",
    # post-kind-create-hook values this platform may use ("" always allowed).
    "post_kind_hooks",
    # Where the reconcile timeout of Flux waits comes from: ("bootstrap", key) or ("environment", key).
    "reconcile_timeout",
    # The bootstrap deploys and checks the local workload chain (Podinfo on CAPD); validate checks
    # that the CAPD clusters run the kind node image's Kubernetes version.
    "local_workload",
    # The management cluster's region (mgmt-region) is required, and must match this pattern.
    "region_pattern",
    "region_example",
    # The resource planes (bootstrap.toml resource-plane) krops ships a tree for on this platform: the cloud's own
    # operator, and for aws Crossplane too (docs/environments/crossplane.md).
    "resource_planes",
)
# Every value of resource-plane: the native operator (ACK, ASO, Config Connector) or Crossplane, never both.
RESOURCE_PLANES = ("native", "crossplane")

Profile = namedtuple("Profile", FIELDS)

_AWS_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")
_AZURE_LOCATION = re.compile(r"^[a-z][a-z0-9]{1,39}$")
_GCP_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)*\d$")

_LOCAL = dict(
    local_registry=False,
    lb_rewrite=False,
    pivot_credentials=None,
    cloud=None,
    cloud_teardown_step=None,
    cloud_teardown_before_clusters=None,
    cloud_rows=None,
    hardware_release=False,
    local_containers=False,
    post_kind_hooks=(),
    reconcile_timeout=("environment", "mgmt-ready-timeout"),
    local_workload=False,
    region_pattern=None,
    region_example=None,
    resource_planes=("native",),
)


def _cloud(platform, teardown_step, region_pattern=None, region_example=None, **capabilities):
    """The profile of a cloud platform: its cloud is the platform itself, torn down by ``teardown_step``, in the
    regions ``region_pattern`` matches; ``capabilities`` are its other fields."""
    return Profile(
        **dict(
            _LOCAL,
            platform=platform,
            cloud=platform,
            cloud_teardown_step=teardown_step,
            region_pattern=region_pattern,
            region_example=region_example,
            **capabilities,
        )
    )


PROFILES = {
    "local-host": Profile(
        **dict(
            _LOCAL,
            platform="local-host",
            local_registry=True,
            lb_rewrite=True,
            local_containers=True,
            local_workload=True,
            reconcile_timeout=("bootstrap", "local-reconcile-timeout"),
        )
    ),
    "aws": _cloud(
        "aws", "aws-orphan-sweep", _AWS_REGION, "eu-north-1", resource_planes=RESOURCE_PLANES, pivot_credentials="aws"
    ),
    "azure": _cloud("azure", "azure-teardown", _AZURE_LOCATION, "swedencentral", post_kind_hooks=("arc-federate",)),
    "gcp": _cloud(
        "gcp",
        "gcp-teardown",
        _GCP_REGION,
        "europe-north1",
        cloud_teardown_before_clusters="Cloud SQL instances, private services access connections and their ranges",
        post_kind_hooks=("wif-federate",),
    ),
    "local-talos": Profile(**dict(_LOCAL, platform="local-talos", hardware_release=True)),
}

PLATFORMS = tuple(PROFILES)


def get(platform):
    """The profile of a platform name; KeyError names the known ones."""
    try:
        return PROFILES[platform]
    except KeyError:
        raise KeyError("unknown platform {!r} (known: {})".format(platform, ", ".join(PLATFORMS))) from None


def of(env):
    """The profile of an environment (a config_types.Environment) of a loaded Config."""
    return get(env.platform)


def reconcile_timeout(cfg, env):
    """Seconds Flux waits may take for this environment (the profile names the bootstrap.toml key that holds it;
    its attribute is the key with '_' for '-', config_types)."""
    where, key = of(env).reconcile_timeout
    return getattr(cfg.bootstrap if where == "bootstrap" else env, key.replace("-", "_"))


def as_dict(profile):
    """Plain data for Ansible: field names with dashes; patterns as their source text, functions as their name."""
    out = {}
    for name in FIELDS:
        value = getattr(profile, name)
        if callable(value):
            value = value.__name__  # cloud_rows: the rows file's name, without importing it
        elif hasattr(value, "pattern"):
            value = value.pattern
        elif isinstance(value, tuple):
            value = list(value)
        out[name.replace("_", "-")] = value
    return out
