#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: validate
short_description: Render, schema-check and cross-check the krops GitOps tree
version_added: 0.1.0
description:
  - Checks every environment of the GitOps tree (C(mgmt/<env>) and its C(workload/<overlay>)) without touching any cluster.
  - C(render) - every directory with a kustomization file builds with C(kubectl kustomize).
  - C(schema) - every rendered object validates against its JSON schema after Flux postBuild substitution;
    built-in kinds use the schemas of the C(kubernetes-validate) package, custom resources the O(schema_location);
    unknown fields are errors; a kind without schema is an error unless listed in O(allow_kinds).
  - C(flux-graph) - every C(dependsOn) names a Flux Kustomization of the same environment, without cycles; every
    sourceRef, chartRef, healthCheck, decryption and kubeConfig secretRef and substituteFrom names an object the
    tree defines or the lifecycle creates (per C(bootstrap.toml)).
  - C(bootstrap) - C(bootstrap.toml) agrees with the tree - chart pins, provider and pivot manifests, move fallbacks,
    mgmt-cluster and teardown names.
  - C(secrets) - every Secret manifest is a SOPS file (C(*.sops.yaml)) with encrypted data.
  - C(yamllint) - the repository's C(.yamllint) over the environment's files.
  - C(cel) - every custom resource passes the C(x-kubernetes-validations) CEL rules of its schema, evaluated with the
    C(common-expression-language) library and Kubernetes' list, string, regex, quantity, URL and format extensions; rules it cannot
    evaluate are returned in RV(cel_unevaluable), never counted as passed. Transition rules (C(oldSelf)) need the
    previous object - M(krops.platform.render_diff) applies them.
  - C(admission) - every object passes its provider's admission webhooks as the API server runs them on create
    (the defaulting webhook first, then the validating one, with the feature gates the tree sets on its operator
    providers); the message is the API server's denial. The rules are ported from upstream Go source with their
    sources (C(module_utils/admission.py), docs/upstream-facts.md).
  - C(contracts) - each operator provider's release implements the core's contract (its C(metadata.yaml)); one on Cluster
    API's temporary v1beta1 compatibility is returned in RV(contract_warnings); a release built on an end-of-life Cluster API
    line is a finding unless the environment's C(accepted-end-of-life) in C(bootstrap.toml) lists it (then a warning).
  - Never changes anything. Fails, listing every finding, when there is at least one.
author:
  - krops developers (@krops)
options:
  path:
    description:
      - Root of the krops repository (the folder holding C(mgmt/) and C(bootstrap.toml)).
      - Defaults to the current working directory; the C(krops.platform.validate) role passes the playbook folder's parent.
    type: path
  environments:
    description:
      - Environments to check. Defaults to every C(mgmt/<env>) folder present in the tree.
    type: list
    elements: str
  schema_location:
    description:
      - Where the JSON schemas of custom resources are, as a folder or an HTTPS URL template in kubeconform's
        C({group}/{kind}_{version}.json) layout (C({{.Group}}), C({{.ResourceKind}}), C({{.ResourceAPIVersion}}) work too).
      - A relative folder is resolved against the current directory, then against O(path).
      - Defaults to the E(KROPS_SCHEMA_LOCATION) environment variable, else C(schemas/crds) of O(path) (the schemas
        vendored in the repository, so validation works offline).
      - The public catalog is C(https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/{group}/{kind}_{version}.json).
    type: str
  allow_kinds:
    description:
      - Kinds allowed to have no schema, as C(Kind), C(group/Kind) or C(group/version/Kind).
    type: list
    elements: str
    default: []
  config_file:
    description:
      - The C(bootstrap.toml) to cross-check. Defaults to C(<path>/bootstrap.toml).
    type: path
  format:
    description:
      - Shape of RV(output) - C(text) gives one line per finding and a summary per environment, C(json) a JSON document.
    type: str
    choices: [text, json]
    default: text
  cel:
    description:
      - Evaluate the CEL rules of the schemas (the C(cel) rule). Off, validation checks the JSON schemas only,
        as kubeconform does.
    type: bool
    default: true
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.render_bounds
attributes:
  check_mode:
    details: Read-only; runs the same way in check mode.
  diff_mode:
    details: Nothing changes, so there is no diff.
  platform:
    details: Runs on the controller, where the tree and the Python libraries are (the role delegates to localhost).
requirements:
  - kubectl (with kustomize) or kustomize on the controller
  - jsonschema >= 4.26.0, referencing >= 0.37.0, kubernetes-validate >= 1.37.0 and yamllint >= 1.38.0 (Python libraries)
  - common-expression-language >= 0.10.0 (Python library) for the C(cel) rule
"""

EXAMPLES = r"""
- name: Validate every environment of the tree, with the schemas of a local folder
  krops.platform.validate:
    path: "{{ playbook_dir }}/.."
    schema_location: /srv/crd-schemas

- name: Validate local-host only and keep going on findings
  krops.platform.validate:
    environments: [local-host]
    format: json
  register: krops_validation
  failed_when: false
"""

RETURN = r"""
findings:
  description: Every problem found, sorted by environment, file and object.
  returned: always
  type: list
  elements: dict
  contains:
    file:
      description: File relative to O(path) (C(bootstrap.toml) for configuration findings).
      type: str
      sample: mgmt/local-host/cert-manager/flux-ks.yaml
    object:
      description: C(Kind/namespace/name) of the object, a C(bootstrap.toml) key, a line, or C(-).
      type: str
      sample: Kustomization/flux-system/cert-manager
    rule:
      description: One of C(render), C(schema), C(flux-graph), C(bootstrap), C(secrets), C(yamllint), C(cel).
      type: str
      sample: schema
    message:
      description: What is wrong and, where useful, what to do.
      type: str
      sample: "spec: unknown field 'intervall'"
    environment:
      description: Environment the finding belongs to (C(-) for a file of C(mgmt/) or C(workload/) outside every environment).
      type: str
      sample: local-host
  sample:
    - file: mgmt/local-host/cert-manager/flux-ks.yaml
      object: Kustomization/flux-system/cert-manager
      rule: schema
      message: "spec: unknown field 'intervall'"
      environment: local-host
summary:
  description: Per environment, counts of directories, objects, files and findings (also per rule) and the time taken.
  returned: always
  type: dict
  sample: {"local-host": {"directories": 12, "objects": 47, "files": 40, "findings": 0, "seconds": 1.2,
           "by_rule": {"render": 0, "schema": 0, "flux-graph": 0, "bootstrap": 0, "secrets": 0, "yamllint": 0, "cel": 0,
                       "admission": 0, "contracts": 0}, "cel_unevaluable": 0, "warnings": 0}}
output:
  description: The report in the requested O(format) (text lines joined by newlines, or JSON).
  returned: always
  type: str
  sample: "local-host: 12 directories, 47 objects, 40 files, 0 findings"
objects:
  description: Number of rendered objects checked, all environments together.
  returned: always
  type: int
  sample: 47
cel_unevaluable:
  description: CEL rules the library could not evaluate, per object (file, object, environment, message).
  returned: always
  type: list
  elements: dict
  sample: []
contract_warnings:
  description:
    - Warnings of the C(contracts) rule, per provider (file, object, environment, message) - a provider on Cluster API's
      temporary v1beta1 compatibility, or an end-of-life base the environment accepts (C(accepted-end-of-life)). Never findings.
  returned: always
  type: list
  elements: dict
  sample: [{"file": "mgmt/azure/capz-system/infrastructure-provider.yaml", "object": "InfrastructureProvider/capz-system/azure",
            "environment": "azure", "message": "InfrastructureProvider azure v1.25.1 ... runs only through Cluster API's temporary v1beta1 compatibility"}]
environments:
  description: The environments checked.
  returned: always
  type: list
  elements: str
  sample: [local-host]
"""

import json

from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import shell
from ansible_collections.krops.platform.plugins.module_utils import validate as krops_validate

NAME = "krops.platform.validate"

# validate could not read its input (as opposed to: it read it and found something).
WORDING = {krops_validate.ValidateError: "validate could not run: {error}"}


def argument_spec():
    return dict(
        path=dict(type="path"),
        environments=dict(type="list", elements="str"),
        schema_location=dict(type="str"),
        allow_kinds=dict(type="list", elements="str", default=[]),
        config_file=dict(type="path"),
        format=dict(type="str", choices=["text", "json"], default="text"),
        cel=dict(type="bool", default=True),
        **render.BOUNDS_ARGS,
    )


def body(module, step):
    params = module.params
    step("validating the trees")
    result = krops_validate.run(
        **shell.options(
            params, "path environments schema_location allow_kinds config_file cel deadline", memory="memory_limit"
        )
    )
    if params["format"] == "json":
        output = json.dumps(
            {"findings": result["findings"], "summary": result["summary"], "warnings": result["warnings"]}, indent=2
        )
    else:
        output = "\n".join(krops_validate.format_text(result))
    returned = dict(
        changed=False,
        findings=result["findings"],
        summary=result["summary"],
        output=output,
        objects=result["objects"],
        environments=result["environments"],
        cel_unevaluable=result["cel_unevaluable"],
        contract_warnings=result["warnings"],
    )
    if result["findings"]:
        lines = krops_validate.format_text(result)
        raise errors.ValidationError(
            "validate found %d finding(s):\n%s" % (len(result["findings"]), "\n".join(lines)), returned
        )
    return returned


def main():
    shell.run(NAME, argument_spec(), body, wording=WORDING)


if __name__ == "__main__":
    main()
