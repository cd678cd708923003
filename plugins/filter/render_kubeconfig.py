# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

"""The krops.platform.render_kubeconfig filter (documented in render_kubeconfig.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.krops.platform.plugins.module_utils import errors


def render_kubeconfig(raw, context, server=None):
    # Imported on use: kubeconfigs imports kube, which imports the kubernetes client (seconds: jsonschema's format checkers build
    # their grammars at import), and ansible-doc imports every filter file just to list its filters.
    from ansible_collections.krops.platform.plugins.module_utils import kubeconfigs

    if not isinstance(raw, str) or not isinstance(context, str) or not context:
        raise AnsibleFilterError("render_kubeconfig takes kubeconfig text and a non-empty context name")
    try:
        return kubeconfigs.render_kubeconfig(raw, context, server or None)
    except errors.KropsError as exc:
        raise AnsibleFilterError(f"render_kubeconfig: {exc}") from None


class FilterModule:
    def filters(self):
        return {"render_kubeconfig": render_kubeconfig}
