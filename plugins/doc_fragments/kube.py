# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of every krops module that talks to a Kubernetes cluster (module_utils.kube.KUBE_ARGS).

The auth options and their environment variables are those of kubernetes.core (6.x,
plugins/doc_fragments/k8s_auth_options.py, plugins/module_utils/k8s/client.py), resolved in
the same order: the option, else its K8S_AUTH_* variable.
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig of the cluster to act on.
      - When not set, the E(K8S_AUTH_KUBECONFIG) environment variable; when neither it nor O(context) is set,
        inside a pod (AWX) the pod's service account, else the default kubeconfig (E(KUBECONFIG) or
        C(~/.kube/config)) is used, in kubernetes.core's order.
      - Set it once for every krops module with C(module_defaults) and the group
        C(group/krops.platform.k8s).
    type: path
  context:
    description:
      - Context of O(kubeconfig) to use.
      - When not set, the E(K8S_AUTH_CONTEXT) environment variable, then the kubeconfig's current context.
    type: str
  host:
    description:
      - URL of the API server. With O(api_key), O(username) and O(password), or O(client_cert) and O(client_key),
        no kubeconfig is read; otherwise it overrides the kubeconfig's server.
      - When not set, E(K8S_AUTH_HOST).
    type: str
  api_key:
    description: Bearer token for the API server. When not set, E(K8S_AUTH_API_KEY).
    type: str
  username:
    description: User name for basic authentication. When not set, E(K8S_AUTH_USERNAME).
    type: str
  password:
    description: Password for basic authentication. When not set, E(K8S_AUTH_PASSWORD).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate. When not set, E(K8S_AUTH_VERIFY_SSL) (V(no), V(false) or
        V(0) disable it), then the kubeconfig.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA certificate file that signed the API server's certificate. When not set, E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate file. When not set, E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: Key file of O(client_cert). When not set, E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description: HTTP proxy URL for the API server. When not set, E(K8S_AUTH_PROXY).
    type: str
  no_proxy:
    description: Comma-separated hosts not to reach through O(proxy). When not set, E(K8S_AUTH_NO_PROXY).
    type: str
  impersonate_user:
    description: User to impersonate. When not set, E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description: Groups to impersonate. When not set, E(K8S_AUTH_IMPERSONATE_GROUPS) (comma-separated).
    type: list
    elements: str
  request_timeout:
    description:
      - Seconds one Kubernetes API request may take (connect, and each read; a watch gets its own window on top).
        A wait never outlives its timeout by more than this.
      - When not set, E(K8S_AUTH_REQUEST_TIMEOUT), then 30.
    type: int
requirements:
  - kubernetes >= 37.0.1 (Python library)
"""

    # The platform every teardown step on one cluster shares (module_utils.kube_shell); the other attributes are
    # krops.platform.attributes, and each module documents its own check_mode. Used as
    # krops.platform.kube.teardown_step.
    TEARDOWN_STEP = r"""
attributes:
  platform:
    details: Talks to the Kubernetes API from the host it runs on (the teardown role delegates to localhost).
"""

    # The options capi_cluster_delete and tinkerbell_release both hand to kube_rows.delete_clusters. Used as
    # krops.platform.kube.cluster_delete.
    CLUSTER_DELETE = r"""
options:
  namespace:
    description: Namespace of the Cluster objects.
    type: str
    default: default
  suspend:
    description: Suspend Flux before deleting.
    type: bool
    default: true
"""
