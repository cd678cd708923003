#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: oci_artifact_push
short_description: Publish directories as a reproducible Flux OCI artifact
version_added: 0.1.0
description:
  - Packs the directories O(paths) (each under its path relative to O(root)) into a reproducible
    tar.gz and pushes it to O(registry) as O(repository):O(tag), the way C(flux push artifact) does, without
    the flux CLI.
  - The layer has media type C(application/vnd.cncf.flux.content.v1.tar+gzip), the config
    C(application/vnd.cncf.flux.config.v1+json); the manifest (C(application/vnd.oci.image.manifest.v1+json))
    carries the annotations C(org.opencontainers.image.source) and C(org.opencontainers.image.revision)
    (C(<branch>@sha1:<commit>)) that source-controller shows.
  - The tarball is reproducible (sorted entries, mtime 0, uid/gid 0, modes 0755/0644, gzip mtime 0) and the
    creation annotation is fixed, so the same content and revision give the same manifest digest; when the tag
    already points at that digest nothing is pushed (C(changed=false)). Blobs the registry has are not uploaded again.
  - Symbolic links and special files are not packed (listed in RV(skipped)).
author:
  - krops developers (@krops)
options:
  registry:
    description: Registry as C(host:port), for example C(localhost:5001).
    type: str
    required: true
  repository:
    description: Repository in the registry.
    type: str
    default: krops
  tag:
    description: Tag to push (moved when the content changes).
    type: str
    default: latest
  paths:
    description: Directories to publish, relative to O(root) (for example C(mgmt/local-host), C(workload/local-host)).
    type: list
    elements: path
    required: true
  root:
    description: The repository root; paths in the tarball are relative to it. Default is the current directory.
    type: path
  source:
    description: The Git URL recorded in the C(org.opencontainers.image.source) annotation.
    type: str
  revision:
    description:
      - The revision recorded in C(org.opencontainers.image.revision), C(<branch>@sha1:<commit>).
      - Default is computed with git in O(root); C(unknown) outside a Git checkout.
    type: str
  insecure:
    description: Talk plain HTTP to the registry (local registries).
    type: bool
    default: false
  username:
    description: Registry user name (basic auth, or for the bearer-token exchange).
    type: str
  password:
    description: Registry password or token.
    type: str
extends_documentation_fragment:
  - krops.platform.attributes
attributes:
  check_mode:
    details: Builds the artifact, computes its digest and compares it with the tag; never uploads.
  platform:
    details: Reads the tree and pushes to the registry from the host it runs on, in practice the controller.
seealso:
  - module: krops.platform.kind_cluster
  - name: Flux OCI artifacts
    description: The artifact format that source-controller's OCIRepository consumes.
    link: https://fluxcd.io/flux/cheatsheets/oci-artifacts/
"""

EXAMPLES = r"""
- name: Publish the local-host trees to the local registry
  krops.platform.oci_artifact_push:
    registry: localhost:5001
    insecure: true
    root: "{{ playbook_dir }}/.."
    paths:
      - mgmt/local-host
      - workload/local-host
    source: https://github.com/krops/krops
  register: artifact

- name: Show where Flux will find it
  ansible.builtin.debug:
    msg: "{{ artifact.url }}@{{ artifact.digest }} ({{ artifact.revision }})"
"""

RETURN = r"""
digest:
  description: Digest of the artifact's manifest.
  returned: always
  type: str
  sample: sha256:3b6f0c1d2e4a5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4
url:
  description: The artifact's reference for an OCIRepository.
  returned: always
  type: str
  sample: oci://localhost:5001/krops:latest
revision:
  description: The revision annotation.
  returned: always
  type: str
  sample: main@sha1:0123456789abcdef0123456789abcdef01234567
previous_digest:
  description: Digest the tag pointed at before (null when the tag did not exist or could not be read in check mode).
  returned: always
  type: str
  sample: sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0
files:
  description: Number of entries (directories and files) in the tarball.
  returned: always
  type: int
  sample: 214
layer_digest:
  description: Digest of the tar.gz layer.
  returned: always
  type: str
  sample: sha256:9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9
layer_size:
  description: Size of the tar.gz layer in bytes.
  returned: always
  type: int
  sample: 48213
skipped:
  description: Symbolic links and special files left out of the tarball.
  returned: always
  type: list
  elements: str
  sample: [mgmt/local-host/README.link]
"""

from ansible_collections.krops.platform.plugins.module_utils import oci
from ansible_collections.krops.platform.plugins.module_utils import shell

NAME = "krops.platform.oci_artifact_push"

# A registry failure names the artifact it was pushing.
WORDING = {oci.OciError: "oci://{params[registry]}/{params[repository]}:{params[tag]}: {error}"}


def argument_spec():
    return dict(
        registry=dict(type="str", required=True),
        repository=dict(type="str", default="krops"),
        tag=dict(type="str", default="latest"),
        paths=dict(type="list", elements="path", required=True),
        root=dict(type="path"),
        source=dict(type="str"),
        revision=dict(type="str"),
        insecure=dict(type="bool", default=False),
        username=dict(type="str"),
        password=dict(type="str", no_log=True),
    )


def body(module, step):
    params = module.params
    step("pushing the artifact")
    verb = shell.options(params, "repository tag root source revision insecure username password")
    result = oci.push_artifact(params["registry"], params["paths"], check_mode=module.check_mode, **verb)
    warning = result.pop("warning", None)
    if warning:
        module.warn(warning)
    if result["skipped"]:
        module.warn("not packed (symbolic links or special files): {}".format(", ".join(result["skipped"])))
    return result


def main():
    shell.run(NAME, argument_spec(), body, wording=WORDING, required_together=[["username", "password"]])


if __name__ == "__main__":
    main()
