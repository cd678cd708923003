# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of every krops module that reads an environment from bootstrap.toml (module_utils.config)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  environment:
    description:
      - The bootstrap.toml environment to act on, for example V(local-host) or V(aws).
      - Defaults to E(KROPS_PROFILE), then C(bootstrap.default-environment).
    type: str
  config_file:
    description: Path to bootstrap.toml. Defaults to E(BOOTSTRAP_CONFIG), then C(bootstrap.toml) in the current folder.
    type: path
"""
