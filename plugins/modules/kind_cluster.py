#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: kind_cluster
short_description: Create, reuse, recreate or delete a kind cluster
version_added: 0.1.0
description:
  - Brings the kind cluster O(name) to O(state) with the C(kind) CLI, then waits until every node is Ready
    through the Kubernetes API and exports the cluster's kubeconfig to O(kubeconfig_path) (mode 0600).
  - An existing cluster is reused (C(changed=false)) unless O(recreate=true); a reused cluster whose
    nodes do not become Ready within O(wait_timeout) fails and suggests O(recreate=true).
  - The node config mounts the container engine socket (O(engine_socket)) into every node at the same path,
    so providers such as CAPD can reach the engine. With O(registry_mirror), containerd in every node pulls
    O(registry_mirror.host) from O(registry_mirror.endpoint); as in kind's local-registry guide, containerd is
    pointed at C(/etc/containerd/certs.d) at creation and C(<host>/hosts.toml) is written into each node with
    C(<engine> exec) afterwards (a mount cannot carry the C(:) of C(localhost:5001)).
  - The config is checked against C(kind.x-k8s.io/v1alpha4) first (kind decodes it strictly); an unknown
    field or a mount path with C(:) fails with a message naming it.
  - When it creates the cluster, the module creates the ownership marker ConfigMap
    C(kube-system/krops-bootstrap) (label C(app.kubernetes.io/managed-by=krops); data C(environment),
    C(kind-cluster), C(created-at) in RFC 3339 UTC). Teardown deletes a kind cluster only when it finds that
    marker with the matching environment and name; a reused cluster without one is never given one.
  - The kubeconfig holds the cluster's client key; it is never returned or logged.
author:
  - krops developers (@krops)
options:
  name:
    description:
      - Name of the kind cluster (the kubeconfig context is C(kind-<name>)).
      - kind's cluster-name rule applies (at most 50 characters of a-z, 0-9, '.' and '-'); it is checked before kind runs.
    type: str
    required: true
  state:
    description: V(present) creates or reuses the cluster; V(absent) deletes it (absent is success).
    type: str
    choices: [present, absent]
    default: present
  recreate:
    description: Delete and create the cluster again when it exists.
    type: bool
    default: false
  config:
    description:
      - A full kind C(Cluster) config (C(kind.x-k8s.io/v1alpha4)). Default is one control-plane node.
      - The engine socket mount and the registry mirror are added to every node.
    type: dict
  engine_socket:
    description:
      - Container engine socket mounted into every node at the same path. Set to an empty string to mount nothing.
    type: path
    default: /var/run/docker.sock
  registry_mirror:
    description:
      - Lets containerd in the nodes pull O(registry_mirror.host) from O(registry_mirror.endpoint),
        for example the local registry published on the host.
      - A containerd config patch points the CRI registry at C(/etc/containerd/certs.d) (new clusters);
        C(/etc/containerd/certs.d/<host>/hosts.toml) is written into every node where it differs, on new and
        reused clusters alike.
    type: dict
    suboptions:
      host:
        description: Registry host as workloads name it, for example C(localhost:5001).
        type: str
        required: true
      endpoint:
        description: Where the nodes reach it, for example C(http://krops-registry:5000).
        type: str
        required: true
  environment:
    description:
      - The krops environment this cluster bootstraps; written into the ownership marker at creation.
      - Required with O(state=present).
    type: str
  engine_binary:
    description: Container engine CLI used to write C(hosts.toml) into the nodes. Default C(docker) from E(PATH).
    type: str
  kubeconfig_path:
    description:
      - Export the cluster's kubeconfig there (mode 0600). Entries of other clusters in the file are kept;
        the current context becomes C(kind-<name>).
      - When not set, C(kind create) writes its default kubeconfig and readiness uses a private temporary copy.
      - With O(state=absent), kind removes the cluster's entries from this file; the file itself is deleted when no
        cluster, user or context is left in it.
    type: path
  wait_timeout:
    description: Seconds to wait until every node is Ready (at least 1).
    type: int
    default: 120
  node_image:
    description: Node image for a new cluster (C(kind create cluster --image)).
    type: str
  kind_binary:
    description: Path or name of the C(kind) binary. Default is C(kind) from E(PATH).
    type: str
  require_registry:
    description:
      - With O(state=absent), the base URL of an OCI registry (for example V(http://127.0.0.1:5001)) that must
        answer C(GET /v2/) with 200 or 401 before the cluster is deleted; otherwise the deletion is refused and
        nothing is changed (in check mode too).
      - The pivot role sets it on platforms with a local registry, which Flux on the management cluster pulls
        from once kind is gone.
    type: str
extends_documentation_fragment:
  - krops.platform.attributes
attributes:
  check_mode:
    details: Reports what would be created, recreated or deleted; never calls C(kind create/delete) and skips waits.
  platform:
    details: Runs kind against the container engine of the host it runs on (the bootstrap role uses localhost).
requirements:
  - kind (binary)
  - kubernetes >= 37.0.1 (Python library)
seealso:
  - module: krops.platform.oci_artifact_push
"""

EXAMPLES = r"""
- name: Create (or reuse) the management kind cluster with the local registry mirror
  krops.platform.kind_cluster:
    name: mgmt
    kubeconfig_path: "{{ playbook_dir }}/.kube/kind-mgmt.yaml"
    environment: local-host
    registry_mirror:
      host: localhost:5001
      endpoint: http://krops-registry:5000

- name: Recreate it from scratch with two workers
  krops.platform.kind_cluster:
    name: mgmt
    environment: local-host
    recreate: true
    config:
      nodes:
        - role: control-plane
        - role: worker
        - role: worker

- name: Delete it
  krops.platform.kind_cluster:
    name: mgmt
    state: absent

- name: Delete it only while the local registry serves
  krops.platform.kind_cluster:
    name: mgmt
    state: absent
    require_registry: http://127.0.0.1:5001
"""

RETURN = r"""
created:
  description: The cluster was created (or would be, in check mode).
  returned: always
  type: bool
  sample: true
recreated:
  description: The cluster was deleted and created again.
  returned: always
  type: bool
  sample: false
deleted:
  description: The cluster was deleted.
  returned: always
  type: bool
  sample: false
context:
  description: The kubeconfig context of the cluster.
  returned: always
  type: str
  sample: kind-mgmt
kubeconfig_path:
  description: Where the kubeconfig was exported (null when O(kubeconfig_path) is not set).
  returned: always
  type: str
  sample: ~/.kube/config
nodes:
  description: The nodes after the wait (empty in check mode and for O(state=absent)).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
      sample: mgmt-control-plane
    ready:
      description: Whether its Ready condition is True.
      type: bool
      sample: true
  sample: [{name: mgmt-control-plane, ready: true}]
kind_version:
  description: Version of the kind binary (probed once).
  returned: always
  type: str
  sample: 0.32.0
config:
  description: The kind config used for a new cluster (with the socket mount and the mirror patch added).
  returned: when O(state=present)
  type: dict
  sample:
    kind: Cluster
    apiVersion: kind.x-k8s.io/v1alpha4
    containerdConfigPatches:
      - |
        [plugins."io.containerd.grpc.v1.cri".registry]
          config_path = "/etc/containerd/certs.d"
    nodes:
      - role: control-plane
        extraMounts:
          - {hostPath: /var/run/docker.sock, containerPath: /var/run/docker.sock}
marker:
  description: Data of the ownership marker ConfigMap C(kube-system/krops-bootstrap) this run created (null otherwise).
  returned: always
  type: dict
  sample: {environment: local-host, kind-cluster: mgmt, created-at: "2026-12-01T08:00:00Z"}
mirror_nodes:
  description: Nodes whose C(hosts.toml) was written (or would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [mgmt-control-plane]
"""

from ansible_collections.krops.platform.plugins.module_utils import cli, errors, kind, oci, shell

NAME = "krops.platform.kind_cluster"

# Failures of the kind binary name the cluster (kind's own errors already do).
WORDING = {
    cli.CliError: "kind cluster {params[name]}: {error}",
    cli.ToolMissing: "kind cluster {params[name]}: {error} (kind_binary=)",
}


def argument_spec():
    return dict(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        recreate=dict(type="bool", default=False),
        config=dict(type="dict"),
        engine_socket=dict(type="path", default="/var/run/docker.sock"),
        registry_mirror=dict(
            type="dict",
            options=dict(
                host=dict(type="str", required=True),
                endpoint=dict(type="str", required=True),
            ),
        ),
        environment=dict(type="str"),
        engine_binary=dict(type="str"),
        kubeconfig_path=dict(type="path"),
        wait_timeout=dict(type="int", default=120),
        node_image=dict(type="str"),
        kind_binary=dict(type="str"),
        require_registry=dict(type="str"),
    )


def body(module, step):
    params = module.params
    step("checking the options")
    shell.positive(params, "wait_timeout", unit=" second")
    if params["state"] == "absent" and params["require_registry"]:
        step("checking that the registry serves")
        serves, detail = oci.registry_probe(params["require_registry"])
        if not serves:
            raise errors.RegistryError(
                "Not deleting kind cluster {}: the registry {} does not serve /v2/ ({}); Flux on the management "
                "cluster pulls from it. Start it, then run again.".format(
                    params["name"], params["require_registry"], detail
                )
            )
    step("bringing the kind cluster to its state")
    verb = shell.options(
        params,
        "state recreate config engine_socket registry_mirror kubeconfig_path wait_timeout node_image kind_binary "
        "engine_binary environment",
    )
    return kind.ensure(params["name"], check_mode=module.check_mode, **verb)


def main():
    shell.run(NAME, argument_spec(), body, wording=WORDING, required_if=[("state", "present", ["environment"])])


if __name__ == "__main__":
    main()
