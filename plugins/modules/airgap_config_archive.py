#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: airgap_config_archive
short_description: Write the krops configuration as a Flux OCI artifact in an OCI layout tarball
version_added: 0.1.0
description:
  - Packs the directories O(paths) (relative to O(root)) into the same reproducible Flux artifact that
    M(krops.platform.oci_artifact_push) pushes, but writes it as an OCI image layout tarball at O(dest), for
    the C(imageArchives) of the air-gapped Zarf package (airgap/zarf.yaml, component C(krops-config)).
  - The layout's index names the artifact O(reference) (annotation C(org.opencontainers.image.ref.name)),
    which is how Zarf finds images in an archive.
  - The tarball is reproducible; when O(dest) already holds the same bytes nothing is written (C(changed=false)).
author:
  - krops developers (@krops)
options:
  root:
    description: The repository root; paths in the artifact are relative to it.
    type: path
    required: true
  paths:
    description: Directories to pack, relative to O(root) (for example C(mgmt/local-host), C(workload/local-host)).
    type: list
    elements: path
    required: true
  dest:
    description: The tarball to write (its folder is created).
    type: path
    required: true
  reference:
    description: Image reference recorded in the layout index, C(<registry>/<repository>:<tag>).
    type: str
    required: true
  source:
    description: The Git URL recorded in the C(org.opencontainers.image.source) annotation.
    type: str
  revision:
    description: The revision recorded in C(org.opencontainers.image.revision); default computed with git in O(root).
    type: str
extends_documentation_fragment:
  - krops.platform.attributes
attributes:
  check_mode:
    details: Builds the archive in memory and compares it with O(dest); never writes.
  platform:
    details: Runs where the GitOps checkout is, in practice the controller.
seealso:
  - module: krops.platform.oci_artifact_push
"""

EXAMPLES = r"""
- name: Build the configuration artifact for the Zarf package
  krops.platform.airgap_config_archive:
    root: "{{ playbook_dir | dirname }}"
    paths: [mgmt/local-host, workload/local-host]
    dest: "{{ playbook_dir | dirname }}/airgap/build/krops-config.tar"
    reference: krops-registry:5000/krops:latest
"""

RETURN = r"""
digest:
  description: Manifest digest of the artifact.
  returned: success
  type: str
  sample: sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
reference:
  description: The reference recorded in the layout index.
  returned: success
  type: str
  sample: krops-registry:5000/krops:latest
dest:
  description: The tarball path.
  returned: success
  type: str
  sample: /src/krops/airgap/build/krops-config.tar
revision:
  description: The revision recorded in the artifact.
  returned: success
  type: str
  sample: main@sha1:0123456789abcdef0123456789abcdef01234567
"""

import os
import re

from ansible_collections.krops.platform.plugins.module_utils import airgap
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import oci
from ansible_collections.krops.platform.plugins.module_utils import shell

NAME = "krops.platform.airgap_config_archive"
_REFERENCE = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def argument_spec():
    return dict(
        root=dict(type="path", required=True),
        paths=dict(type="list", elements="path", required=True),
        dest=dict(type="path", required=True),
        reference=dict(type="str", required=True),
        source=dict(type="str"),
        revision=dict(type="str"),
    )


def body(module, step):
    p = module.params
    step("checking the options")
    if not _REFERENCE.match(p["reference"]):
        raise errors.ConfigError(
            "reference {!r} is not <registry>/<repository>:<tag> (for example krops-registry:5000/krops:latest)".format(
                p["reference"]
            )
        )
    if not os.path.isdir(p["root"]):
        raise errors.ConfigError("root {} is not a directory: point it at the krops checkout".format(p["root"]))
    step("packing the configuration archive")
    revision = p["revision"] or oci.git_revision(p["root"])
    data, digest = airgap.config_archive(p["root"], p["paths"], p["reference"], p["source"], revision)
    step("writing the archive")
    changed = shell.write_output("dest", p["dest"], data, module.check_mode)
    return dict(changed=changed, digest=digest, reference=p["reference"], dest=p["dest"], revision=revision)


def main():
    shell.run(NAME, argument_spec(), body)


if __name__ == "__main__":
    main()
