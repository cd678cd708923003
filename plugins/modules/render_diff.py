#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: render_diff
short_description: Render the krops GitOps tree at two Git revisions and report what would reconcile
version_added: 0.1.0
description:
  - Extracts two revisions of the Git repository (never the work tree) and renders each one the way
    M(krops.platform.validate) does - every environment folder, every kustomization directory, Flux postBuild
    substitution and ResourceSet expansion.
  - Reports per environment and per Flux Kustomization the objects added, changed (field by field) and removed,
    the clusters and cloud resources touched, image and chart version changes and render failures.
  - Raises danger findings - removing or replacing a Cluster, a managed control plane, a machine pool, a bucket,
    a database instance, a Hardware or a Namespace; changing a deletion, reconcile or ACK adoption policy;
    turning prune on; a Secret committed in plain text; dropping the krops ownership tag of a cloud resource;
    an update the CRD's transition (C(oldSelf)) CEL rules reject; a render failure at the head revision.
  - Fails when a finding is not acknowledged, by its id in O(accept_file) or by O(accept_label) among O(labels).
  - Never changes anything.
author:
  - krops developers (@krops)
options:
  repo:
    description:
      - The Git repository (work tree or bare). Defaults to the current working directory.
    type: path
  base:
    description:
      - The base revision (branch, tag or commit), usually the pull request's target branch.
    type: str
    required: true
  head:
    description:
      - The head revision.
    type: str
    default: HEAD
  merge_base:
    description:
      - Compare O(head) with the merge base of O(base) and O(head) (what the pull request changes), not with
        O(base) itself.
    type: bool
    default: true
  environments:
    description:
      - Environments to compare. Defaults to every C(mgmt/<env>) folder present at either revision; one at neither
        revision fails the module, naming those there.
    type: list
    elements: str
  schema_location:
    description:
      - Schemas for the transition rules (rendering needs none), as for M(krops.platform.validate). Defaults to E(KROPS_SCHEMA_LOCATION),
        else C(schemas/crds) of the head revision.
    type: str
  accept_file:
    description:
      - File listing acknowledged finding ids, one per line; C(#) starts a comment. Exact ids only, no patterns.
    type: path
  labels:
    description:
      - Labels of the pull request.
    type: list
    elements: str
    default: []
  accept_label:
    description:
      - A label that acknowledges every finding when present in O(labels).
    type: str
    default: render-diff/accept
  cel:
    description:
      - Evaluate the transition (C(oldSelf)) CEL rules of the schemas on changed objects.
    type: bool
    default: true
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.render_bounds
attributes:
  check_mode:
    details: Read-only; runs the same way in check mode.
  diff_mode:
    details: The report is the diff; nothing changes.
  platform:
    details: Runs git and kustomize on the controller, where the checkout is.
requirements:
  - git and kubectl (with kustomize) or kustomize on the controller
  - the Python libraries of M(krops.platform.validate), and common-expression-language for the CEL rules
"""

EXAMPLES = r"""
- name: What would this branch change against main
  krops.platform.render_diff:
    repo: "{{ playbook_dir }}/.."
    base: origin/main
  register: krops_render_diff

- name: Keep going on findings, acknowledged ones listed in a file
  krops.platform.render_diff:
    base: origin/main
    accept_file: .github/render-diff-accept.txt
  register: krops_render_diff
  failed_when: false
"""

RETURN = r"""
base:
  description: Commit compared from (the merge base when O(merge_base)).
  returned: always
  type: str
  sample: 9f16282c0a1b2c3d4e5f60718293a4b5c6d7e8f9
head:
  description: Commit compared to.
  returned: always
  type: str
  sample: 44944ca0a1b2c3d4e5f60718293a4b5c6d7e8f90
findings:
  description: Danger findings and render failures, sorted by id.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable id, C(<environment>/<kind>/<object>) - what an accept file lists.
      type: str
      sample: aws/removed/Bucket/default/eu-north-1-workload-data
    kind:
      description: One of C(removed), C(replaced), C(deletion-policy), C(reconcile-policy), C(adoption-policy),
        C(prune-enabled), C(plaintext-secret), C(ownership-dropped), C(transition-rule), C(render-failure).
      type: str
      sample: removed
    environment:
      description: Environment of the finding (C(-) when a whole revision cannot be rendered).
      type: str
      sample: aws
    kustomization:
      description: C(namespace/name) of the Flux Kustomization that applies the object, or C(-).
      type: str
      sample: flux-system/workload-resources
    object:
      description: C(Kind/namespace/name), or the file of a render failure.
      type: str
      sample: Bucket/default/eu-north-1-workload-data
    message:
      description: What would happen and why it is dangerous.
      type: str
      sample: "removes S3 bucket Bucket/default/eu-north-1-workload-data: its controller deletes what it manages"
    acknowledged:
      description: Whether the accept file or the accept label acknowledges it.
      type: bool
      sample: false
  sample:
    - id: aws/removed/Bucket/default/eu-north-1-workload-data
      kind: removed
      environment: aws
      kustomization: flux-system/workload-resources
      object: Bucket/default/eu-north-1-workload-data
      message: "removes S3 bucket Bucket/default/eu-north-1-workload-data: its controller deletes what it manages"
      acknowledged: false
blocking:
  description: Number of findings not acknowledged.
  returned: always
  type: int
  sample: 1
environments:
  description: Per environment - kustomizations (added, changed with fields, removed), clusters, cloud_resources,
    versions, render_failures (base and head), not_compared (directories whose render failed) and present.
  returned: always
  type: dict
  sample:
    local-host:
      present: {base: true, head: true}
      kustomizations:
        flux-system/podinfo:
          added: []
          changed:
            - object: Deployment/podinfo/podinfo
              file: workload/local-host/podinfo/deployment.yaml
              fields: [{path: spec.replicas, base: 1, head: 2}]
          removed: []
      clusters: []
      cloud_resources: []
      versions: []
      render_failures: {base: [], head: []}
      not_compared: []
cel_unevaluable:
  description: Transition rules the CEL library could not evaluate (listed, never counted as passed).
  returned: always
  type: list
  elements: dict
  sample:
    - environment: aws
      object: AWSManagedControlPlane/default/eu-north-1-workload-control-plane
      message: "transition rules not evaluated: apiVersion changes from infrastructure.cluster.x-k8s.io/v1beta1 to
        infrastructure.cluster.x-k8s.io/v1beta2"
stale_acknowledgements:
  description: Ids of the accept file that match no finding.
  returned: always
  type: list
  elements: str
  sample: [aws/removed/Bucket/default/old-bucket]
markdown:
  description: The pull-request comment (starts with the marker C(<!-- krops-render-diff -->)).
  returned: always
  type: str
  sample: "<!-- krops-render-diff -->\n## krops render diff `9f16282c0a1b` → `44944ca0a1b2` ..."
seconds:
  description: Time taken to render each revision, to diff, and in total.
  returned: always
  type: dict
  sample: {render_base: 3.68, render_head: 0.51, diff: 0.07, total: 4.26}
"""

from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import render_diff as krops_render_diff
from ansible_collections.krops.platform.plugins.module_utils import shell

NAME = "krops.platform.render_diff"

# render_diff could not compare (as opposed to: it compared and found something).
WORDING = {krops_render_diff.RenderDiffError: "render_diff could not run: {error}"}


def argument_spec():
    return dict(
        repo=dict(type="path"),
        base=dict(type="str", required=True),
        head=dict(type="str", default="HEAD"),
        merge_base=dict(type="bool", default=True),
        environments=dict(type="list", elements="str"),
        schema_location=dict(type="str"),
        accept_file=dict(type="path"),
        labels=dict(type="list", elements="str", default=[]),
        accept_label=dict(type="str", default=krops_render_diff.DEFAULT_ACCEPT_LABEL),
        cel=dict(type="bool", default=True),
        **render.BOUNDS_ARGS,
    )


def body(module, step):
    p = module.params
    step("rendering and comparing the revisions")
    verb = shell.options(
        p,
        "repo base head environments schema_location accept_file labels accept_label cel deadline",
        use_merge_base="merge_base",
        memory="memory_limit",
    )
    report = krops_render_diff.run(**verb)
    returned = dict(changed=False, markdown=krops_render_diff.markdown(report), **report)
    if report["blocking"]:
        blocking = [f for f in report["findings"] if not f["acknowledged"]]
        raise errors.ValidationError(
            "render_diff found %d finding(s) not acknowledged:\n%s"
            % (len(blocking), "\n".join("{}: {}".format(f["id"], f["message"]) for f in blocking)),
            returned,
        )
    return returned


def main():
    shell.run(NAME, argument_spec(), body, wording=WORDING)


if __name__ == "__main__":
    main()
