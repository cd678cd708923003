# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of the modules that render the trees under bounds (module_utils.render.bounded)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  deadline:
    description:
      - Seconds the whole run may take; crossing it ends the run with a clear error (docs/configuration.md, Bounds).
    type: float
    default: 300
  memory_limit:
    description:
      - Bytes of address space one C(kustomize) run may use (RLIMIT_AS); a build that needs more fails with a clear
        error. Default C($KROPS_RENDER_MEMORY_LIMIT), else 2 GiB.
    type: int
"""
