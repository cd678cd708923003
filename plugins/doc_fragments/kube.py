# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of every krops module that talks to a Kubernetes cluster (module_utils.kube.KUBE_ARGS)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig of the cluster to act on.
      - When not set, the E(K8S_AUTH_KUBECONFIG) environment variable, then the default kubeconfig
        (E(KUBECONFIG) or C(~/.kube/config)) is used.
      - Set it once for every krops module with C(module_defaults) and the group
        C(group/krops.platform.k8s).
    type: path
  context:
    description:
      - Context of O(kubeconfig) to use.
      - When not set, the E(K8S_AUTH_CONTEXT) environment variable, then the kubeconfig's current context.
    type: str
requirements:
  - kubernetes >= 30.0.0 (Python library)
"""
