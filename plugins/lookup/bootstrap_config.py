# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: bootstrap_config
author: krops developers (@krops)
version_added: 0.1.0
short_description: Read values from the krops lifecycle configuration (bootstrap.toml)
description:
  - Returns the value at each dotted key path of bootstrap.toml, validated and normalised by the same
    typed loader that every krops module uses (durations are returned as whole seconds).
  - Documented environment variables override file values, for example E(REGISTRY_PORT),
    E(GIT_REPO_URL), E(AGE_KEY_FILE) and E(MGMT_READY_TIMEOUT); see docs/configuration.md.
  - The term V(environment) returns the selected environment's name; V(current.<key>) reads a key of the
    selected environment.
  - The term V(profile) returns the capabilities of the selected environment's platform (module_utils.profiles,
    for example V(profile.local-registry)); V(profiles.<environment>) those of another environment. Roles test
    these instead of comparing platform names.
options:
  _terms:
    description: Dotted key paths, for example V(environments.aws.mgmt-cluster) or V(charts.cert-manager).
    required: true
    type: list
    elements: str
  file:
    description:
      - Path to bootstrap.toml.
      - Defaults to E(BOOTSTRAP_CONFIG), then C(bootstrap.toml) in the parent folder of the playbook
        folder, then C(bootstrap.toml) in the current folder (the resolver the modules use too,
        module_utils.config.resolve_path).
    type: path
  environment:
    description:
      - Environment that V(current.*) and V(environment) refer to.
      - Defaults to E(KROPS_PROFILE), then C(bootstrap.default-environment).
    type: str
notes:
  - A missing key, an unknown environment or an invalid file fails with a message naming the file,
    the key path, what was expected and the valid environment names.
"""

EXAMPLES = r"""
- name: Name of the AWS management cluster
  ansible.builtin.debug:
    msg: "{{ lookup('krops.platform.bootstrap_config', 'environments.aws.mgmt-cluster') }}"

- name: Start the local registry only where the platform needs one
  ansible.builtin.debug:
    msg: local registry needed
  when: lookup('krops.platform.bootstrap_config', 'profile.local-registry')

- name: Chart pins installed before Flux exists
  ansible.builtin.set_fact:
    krops_charts: "{{ lookup('krops.platform.bootstrap_config', 'charts', file=krops_config_file) }}"
"""

RETURN = r"""
_raw:
  description: The value at each key path (a string, number, boolean, list or dictionary).
  type: list
  elements: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            # One resolver for the lookup and the modules; the file is read once per process.
            loaded = krops_config.load(
                self.get_option("file") or None,
                environment=self.get_option("environment"),
                playbook_dir=(variables or {}).get("playbook_dir"),
            )
            return [loaded.lookup(term) for term in terms]
        except krops_config.ConfigKeyError as exc:
            raise AnsibleLookupError(str(exc)) from None
