# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One error root for every krops module, plugin and role.

``KropsError(message, result)``: ``message`` is the one line the user reads, ``result``
the partial result a module returns with its failure (what was done before it failed).
Each area has one subclass here, and every exception class krops defines derives from one of
them (tests/unit/plugins/module_utils/test_error_tree.py walks plugins/ and checks it); no class
name is defined twice. Modules catch ``KropsError`` once, in the module shell
(module_utils.shell), never a ladder of per-area exceptions, and a module lets a typed error
through rather than catch it and raise another with the same message.

Importable without Ansible.
"""

from __future__ import annotations


class KropsError(Exception):
    """An expected failure: bad input, an unreachable cluster, a refusal. Never a krops bug."""

    area = "krops"
    step = None  # the step of a stepped run (steps.Sequence) the error came out of; the engine names it

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
    """A pivot phase failed; ``phase`` (its ``step``) names it, and ``result`` holds what was done so far. A phase
    may raise it with None: the steps engine that runs the phases (steps.Sequence) names the phase it came out of;
    it stays None only before the phases run."""

    area = "pivot"

    def __init__(self, phase, message, result=None):
        super().__init__(message, result)
        self.step = phase

    @property
    def phase(self):
        return self.step


class FluxError(KropsError):
    """The Flux handoff cannot go on; ``result`` holds what was done and observed so far."""

    area = "flux"


class TeardownError(KropsError):
    """A teardown step cannot go on; ``result`` holds what was done and observed so far."""

    area = "teardown"


class CloudError(KropsError):
    """A cloud API (AWS, Azure, GCP) failed or refused; ``result`` holds the partial result."""

    area = "cloud"


class RegistryError(KropsError):
    """The OCI registry failed or refused."""

    area = "registry"


class ValidationError(KropsError):
    """The GitOps trees do not validate."""

    area = "validation"
