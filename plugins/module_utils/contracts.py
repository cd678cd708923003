# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Provider contracts and support windows: what each pinned provider release declares and is built on.

Each provider's ``metadata.yaml`` maps its release series to the Cluster API contract it implements;
the core's series maps to the contract it supports (cluster-api ``metadata.yaml``; one contract per
release, docs/book/src/reference/versions.md "Cluster API release vs contract versions" @ v1.14.0).
A provider on an older contract than the core runs only through the core's temporary compatibility
(v1beta2 core with v1beta1 providers: "v1beta1 (temporarily)", EOL with v1.16). Each provider release
is also built on a Cluster API library line (its ``go.mod``); a line past its end of life gets no fixes.

validate reads this registry (rule ``contracts``): a provider on another contract than the core's is a
finding, one on the temporary bridge a warning naming it; an end-of-life base is a finding unless the
environment accepts it by name (bootstrap.toml ``accepted-end-of-life``), then a warning.
The sources of every row are in docs/upstream-facts.md "Provider contracts and support windows".
"""

from __future__ import annotations

import re

from ansible_collections.krops.platform.plugins.module_utils import preflight

# Cluster API release series -> contract: the table preflight checks clusterctl against
# (cluster-api metadata.yaml at each tag).
CORE_CONTRACTS = preflight.CAPI_CONTRACTS
# Contracts a core contract still accepts from providers, temporarily (versions.md @ v1.14.0).
BRIDGES = {
    ("v1beta2", "v1beta1"): "Cluster API's temporary v1beta1 compatibility (deprecated since v1.11, EOL with v1.16)"
}
# Cluster API release lines and their support (versions.md @ v1.14.0, snapshot 2026-08-22).
CAPI_LINES = {
    (1, 14): "standard support",
    (1, 13): "standard support",
    (1, 12): "maintenance since 2026-08-18",
    (1, 11): "EOL since 2026-08-18",
    (1, 10): "EOL since 2026-04-21",
    (1, 9): "EOL since 2025-12-18",
    (1, 8): "EOL since 2025-08-12",
}


class Provider:
    """One provider: its repository, release series -> contract (metadata.yaml), release -> the Cluster
    API line its go.mod builds on."""

    def __init__(self, repo, series, bases):
        self.repo, self.series, self.bases = repo, series, bases


_CORE = Provider("kubernetes-sigs/cluster-api", CORE_CONTRACTS, {"v1.13.5": (1, 13)})

# (operator provider kind, provider name) -> Provider. Rows for the releases the trees pin.
PROVIDERS = {
    ("CoreProvider", "cluster-api"): _CORE,
    ("BootstrapProvider", "kubeadm"): _CORE,
    ("ControlPlaneProvider", "kubeadm"): _CORE,
    ("InfrastructureProvider", "docker"): _CORE,
    ("InfrastructureProvider", "aws"): Provider(
        "kubernetes-sigs/cluster-api-provider-aws", {(2, m): "v1beta1" for m in range(0, 12)}, {"v2.11.1": (1, 11)}
    ),
    ("InfrastructureProvider", "azure"): Provider(
        "kubernetes-sigs/cluster-api-provider-azure", {(1, m): "v1beta1" for m in range(0, 26)}, {"v1.25.1": (1, 13)}
    ),
    ("InfrastructureProvider", "gcp"): Provider(
        "kubernetes-sigs/cluster-api-provider-gcp", {(1, m): "v1beta1" for m in range(0, 13)}, {"v1.12.0": (1, 12)}
    ),
    ("InfrastructureProvider", "tinkerbell-tinkerbell"): Provider(
        "tinkerbell/cluster-api-provider-tinkerbell",
        {
            (0, 1): "v1beta1",
            (0, 3): "v1beta1",
            (0, 4): "v1beta1",
            (0, 5): "v1beta1",
            (0, 6): "v1beta1",
            (0, 7): "v1beta2",
        },
        {"v0.7.0": (1, 12)},
    ),
    ("BootstrapProvider", "talos"): Provider(
        "siderolabs/cluster-api-bootstrap-provider-talos",
        {(0, 3): "v1alpha3", (0, 4): "v1alpha4", (0, 5): "v1beta1", (0, 6): "v1beta1", (0, 7): "v1beta2"},
        {"v0.6.12": (1, 10)},
    ),
    ("ControlPlaneProvider", "talos"): Provider(
        "siderolabs/cluster-api-control-plane-provider-talos",
        {(0, 2): "v1alpha3", (0, 3): "v1alpha4", (0, 4): "v1beta1", (0, 5): "v1beta1"},
        {"v0.5.12": (1, 10)},
    ),
    ("AddonProvider", "helm"): Provider(
        "kubernetes-sigs/cluster-api-addon-provider-helm",
        {
            (0, 1): "v1beta1",
            (0, 2): "v1beta1",
            (0, 3): "v1beta1",
            (0, 4): "v1beta1",
            (0, 5): "v1beta2",
            (0, 6): "v1beta2",
        },
        {"v0.6.4": (1, 13)},
    ),
}

_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)")


def series_of(version):
    match = _VERSION.match(str(version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def check(providers, accepted=()):
    """``providers``: [(kind, name, version)] of one environment. Returns (findings, warnings), each a list of
    (kind, name, message)."""
    findings, warnings = [], []
    core = next(((k, n, v) for k, n, v in providers if k == "CoreProvider"), None)
    core_contract = CORE_CONTRACTS.get(series_of(core[2])) if core else None
    accepted = set(accepted)
    for kind, name, version in providers:
        label = f"{kind} {name} {version}"
        provider = PROVIDERS.get((kind, name))
        if provider is None:
            findings.append(
                (
                    kind,
                    name,
                    f"{label}: no contract known for this provider (add its metadata.yaml to module_utils/contracts.py)",
                )
            )
            continue
        contract = provider.series.get(series_of(version))
        if contract is None:
            findings.append(
                (kind, name, f"{label}: release series not in {provider.repo} metadata.yaml as krops knows it")
            )
            continue
        if core_contract and contract != core_contract:
            bridge = BRIDGES.get((core_contract, contract))
            text = (
                f"{label} ({provider.repo}) implements contract {contract}, the core {core[2]} contract {core_contract}"
            )
            if bridge:
                warnings.append((kind, name, f"{text}: it runs only through {bridge}"))
            else:
                findings.append((kind, name, f"{text}: not compatible; pin a release of the core's contract"))
        base = provider.bases.get(version)
        status = CAPI_LINES.get(base) if base else None
        key = f"{kind}/{name}"
        if status and status.startswith("EOL"):
            text = f"{label} ({provider.repo}) is built on Cluster API v{base[0]}.{base[1]} ({status} in Cluster API's versions.md)"
            if key in accepted:
                warnings.append((kind, name, f"{text}; accepted by accepted-end-of-life in bootstrap.toml"))
            else:
                findings.append(
                    (
                        kind,
                        name,
                        f"{text}: pin a release built on a supported line, or list {key} in the environment's "
                        "accepted-end-of-life in bootstrap.toml",
                    )
                )
            accepted.discard(key)
    for key in sorted(accepted):
        kind, _slash, name = key.partition("/")
        findings.append(
            (
                kind,
                name,
                f"accepted-end-of-life lists {key}, which is not an end-of-life provider of this environment: remove it",
            )
        )
    return findings, warnings
