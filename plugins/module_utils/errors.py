# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One error root for every krops module, plugin and role.

``KropsError(message, result)``: ``message`` is the one line the user reads, ``result``
the partial result a module returns with its failure (what was done before it failed).
Each area has one subclass; modules catch ``KropsError`` once, in the module shell
(module_utils.shell), never a ladder of per-area exceptions.

Importable without Ansible.
"""

from __future__ import annotations


class KropsError(Exception):
    """An expected failure: bad input, an unreachable cluster, a refusal. Never a krops bug."""

    area = "krops"

    def __init__(self, message, result=None):
        super().__init__(message)
        self.message = str(message)
        self.result = dict(result or {})

    def __str__(self):
        return self.message


class ConfigError(KropsError):
    """bootstrap.toml, an override or a module argument does not describe a valid configuration."""

    area = "configuration"


class KubeError(KropsError):
    """A Kubernetes API call failed in a way the user must act on."""

    area = "kubernetes"


class ToolError(KropsError):
    """An external binary (kind, helm, clusterctl, sops, docker) is missing or failed."""

    area = "tool"


class PivotError(KropsError):
    """A pivot phase failed."""

    area = "pivot"


class FluxError(KropsError):
    """The Flux handoff failed."""

    area = "flux"


class TeardownError(KropsError):
    """Teardown refused or failed."""

    area = "teardown"


class CloudError(KropsError):
    """A cloud API (AWS, Azure, GCP) failed or refused."""

    area = "cloud"


class RegistryError(KropsError):
    """The OCI registry failed or refused."""

    area = "registry"


class ValidationError(KropsError):
    """The GitOps trees do not validate."""

    area = "validation"
