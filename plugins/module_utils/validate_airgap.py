# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``airgap`` rule (local-host, when airgap/zarf.yaml exists): the image lists agree.

The checks are airgap_package.validate_hook's (module_utils/airgap_package.py, docs/airgap.md); registered in
validate.REGISTRY.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import airgap, airgap_package

RULE = "airgap"


def applies(env):
    """The air-gapped environment, once its tree renders (images are read from the rendered objects)."""
    return env.name == airgap.ENVIRONMENT and not any(f.rule == "render" for f in env.findings)


def check(env):
    """Every image of airgap/zarf.yaml is in airgap/images.txt with its tag and digest, and every image
    the rendered tree references is listed there.

    Enforces Zarf's package contract (docs/airgap.md): an air-gapped cluster pulls only the images the
    package carries, by the digest it recorded.
    """
    for file, obj, message in airgap_package.validate_hook(env.root, env.renderer):
        env.add(file, obj, RULE, message)
