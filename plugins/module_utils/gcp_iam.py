# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""GCP IAM on teardown: the service accounts and workload identity pool providers an environment created (by
exact name from bootstrap.toml, refused when the tree still needs them), and the project grants to remove."""

from __future__ import annotations

import os
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import config_names
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import (
    first_line,
)


GCP_PROVIDER_NAME = config_names.GCP_WIF_PROVIDER_NAME
GCP_ACCOUNT_ID = config_names.GCP_SERVICE_ACCOUNT_ID


def gcp_iam_refusals(cfg, env, accounts, providers):
    """Refuse, before any call, service accounts and providers validate would refuse (ownership.gcp_iam_problems:
    a prerequisite such as krops-capg, another pool's provider, a name the tree does not declare). The tree is
    read from mgmt/<environment>/ of the repository of bootstrap.toml (_tree_objects)."""
    if not accounts and not providers:
        return
    top = os.path.join(cfg.root, "mgmt", cfg.selected)
    if not os.path.isdir(top):
        raise CloudError(
            f"no tree {top} next to bootstrap.toml: gcp_teardown checks service accounts and workload identity "
            "providers against the tree before it deletes any (run it from the krops checkout)"
        )
    objects = _tree_objects(top)
    declared = ownership.gcp_iam_declared(objects, env.post_kind_create_hook)
    refused = [m for dummy, refuse, m in ownership.gcp_iam_problems(accounts, providers, declared) if refuse]
    if refused:
        raise CloudError(
            "gcp_teardown refuses to delete what krops does not own (the rules validate applies, docs/teardown.md): "
            + "; ".join(refused)
        )


def _tree_objects(top):
    """The manifests under top, each with the commonAnnotations of every kustomization above it (up to top).

    Read as plain YAML through the bounded loader, without kustomize (teardown needs no renderer). Taking
    every enclosing kustomization's annotations errs on the side of refusing: an abandon annotation
    anywhere above an account makes it a prerequisite.
    """
    from ansible_collections.krops.platform.plugins.module_utils import render  # pylint: disable=import-outside-toplevel

    def load(path):
        try:
            return render.load_yaml_documents(path)
        except (OSError, ValueError, render.YAMLLimitError) as exc:
            raise CloudError(f"cannot read {path} of the tree: {exc}") from None
        except Exception as exc:  # pylint: disable=broad-except  # yaml.YAMLError, without importing yaml here
            raise CloudError(f"cannot parse {path} of the tree: {first_line(exc)}") from None

    objects, inherited = [], {top: {}}
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        annotations = dict(inherited.get(folder) or {})
        for name in render.KUSTOMIZATION_FILES:
            if name in files:
                for doc in load(os.path.join(folder, name)):
                    annotations.update(doc.get("commonAnnotations") or {})
        for sub in dirs:
            inherited[os.path.join(folder, sub)] = annotations
        for name in sorted(files):
            if name in render.KUSTOMIZATION_FILES or not name.endswith((".yaml", ".yml")):
                continue
            for doc in load(os.path.join(folder, name)):
                meta = doc.get("metadata")
                if isinstance(meta, dict):
                    meta["annotations"] = dict(annotations, **(meta.get("annotations") or {}))
                objects.append(doc)
    return objects


def gcp_account_email(account, project):
    """The email of a user-managed service account id in project (IAM: <id>@<project>.iam.gserviceaccount.com)."""
    return f"{account}@{project}.iam.gserviceaccount.com"


def _gcp_policy_url(roots, project):
    return "{}/projects/{}".format(roots["cloudresourcemanager"], urllib.parse.quote(project))


def _gcp_grant_members(email):
    """Whether a project policy member is exactly this account (also its deleted:...?uid= form)."""
    return lambda m: m == f"serviceAccount:{email}" or m.startswith(f"deleted:serviceAccount:{email}?uid=")


def gcp_accounts(http, roots, project, accounts):
    """(grant items, account items): the named accounts that exist and every project grant to exactly them."""
    if not accounts:
        return [], []
    grants, found = [], []
    status, policy = http.request("POST", _gcp_policy_url(roots, project) + ":getIamPolicy", _POLICY_OPTIONS)
    for account in accounts:
        email = gcp_account_email(account, project)
        is_member = _gcp_grant_members(email)
        for binding in policy.get("bindings") or []:
            for member in binding.get("members") or []:
                if is_member(member):
                    grants.append(
                        {
                            "type": "iam-grant",
                            "name": "{} {}".format(binding["role"], member),
                            "url": _gcp_policy_url(roots, project),
                            "reason": f"project grant to service account {account} (teardown.service-accounts)",
                            "_role": binding["role"],
                            "_member": member,
                        }
                    )
        url = "{}/projects/{}/serviceAccounts/{}".format(
            roots["iam"], urllib.parse.quote(project), urllib.parse.quote(email)
        )
        if http.get(url)[0] != 404:
            found.append(
                {
                    "type": "service-account",
                    "name": email,
                    "url": url,
                    "reason": "named in bootstrap.toml (teardown.service-accounts)",
                }
            )
    return grants, found


def gcp_providers(http, roots, project, providers):
    """The named <pool>/<provider> that exist and are not soft-deleted already (state DELETED)."""
    found = []
    for name in providers:
        pool, dummy, provider = name.partition("/")
        url = "{}/projects/{}/locations/global/workloadIdentityPools/{}/providers/{}".format(
            roots["iam"], urllib.parse.quote(project), urllib.parse.quote(pool), urllib.parse.quote(provider)
        )
        status, body = http.get(url)
        if status != 404 and body.get("state") != "DELETED":
            found.append(
                {
                    "type": "workload-identity-provider",
                    "name": name,
                    "url": url,
                    "reason": "named in bootstrap.toml (teardown.workload-identity-providers)",
                }
            )
    return found


# policy version 3 so conditional bindings come back whole (a lower version would be refused on write)
_POLICY_OPTIONS = {"options": {"requestedPolicyVersion": 3}}
_POLICY_RETRIES = 5


def gcp_remove_grant(http, item):
    """Read-modify-write of the project policy with its etag: remove exactly one member from one role.

    A 409 (ABORTED: the policy changed since it was read) re-reads and retries.
    """
    for dummy in range(_POLICY_RETRIES):
        status, policy = http.request("POST", item["url"] + ":getIamPolicy", _POLICY_OPTIONS)
        changed = False
        for binding in policy.get("bindings") or []:
            if binding.get("role") == item["_role"] and item["_member"] in (binding.get("members") or []):
                binding["members"] = [m for m in binding["members"] if m != item["_member"]]
                changed = True
        if not changed:
            return ownership.ABSENT
        policy["bindings"] = [b for b in policy["bindings"] if b.get("members")]
        status, answer = http.request("POST", item["url"] + ":setIamPolicy", {"policy": policy}, answer_ok=(409,))
        if status != 409:
            return ownership.DELETED
    raise CloudError(
        f"the project IAM policy kept changing during {_POLICY_RETRIES} read-modify-write attempts (409 ABORTED)"
    )
