# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The strict API server layer (tests/substrate/strict_api.py): each behaviour a real server has."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from tests.substrate.kube_emulator import ApiError
from tests.substrate.strict_api import CRD_BUNDLES, catalog

KS = "kustomize.toolkit.fluxcd.io/v1"


def kustomization(name="apps", **spec):
    body = {
        "interval": "5m",
        "prune": True,
        "path": "./apps",
        "sourceRef": {"kind": "OCIRepository", "name": "flux-system"},
    }
    body.update(spec)
    return {
        "apiVersion": KS,
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": "flux-system"},
        "spec": body,
    }


def http(api, method, path, body=None, ctype="application/json"):
    """(status, parsed body, headers) of a raw request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(api.url + path, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


@pytest.fixture
def api(strict_cluster):
    emulator = strict_cluster("strict", bundles=("flux",))
    emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    return emulator


KS_PATH = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations"


def test_every_bundle_builds_from_the_vendored_schemas():
    for name in CRD_BUNDLES:
        crds = catalog().bundle(name)
        assert crds, name
        for crd in crds:
            storage = [v for v in crd["spec"]["versions"] if v["storage"]]
            assert len(storage) == 1 and storage[0]["schema"]["openAPIV3Schema"]["properties"]
    names = {c["metadata"]["name"] for c in catalog().bundle("cluster-api")}
    assert {"clusters.cluster.x-k8s.io", "clusterresourcesets.addons.cluster.x-k8s.io"} <= names
    assert "helmchartproxies.addons.cluster.x-k8s.io" not in names  # CAAPH installs that one


def test_custom_resource_needs_its_crd(strict_cluster):
    bare = strict_cluster("bare")
    code, body, _headers = http(
        bare, "POST", "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/default/kustomizations", kustomization()
    )
    assert (code, body["reason"]) == (404, "NotFound")
    with pytest.raises(
        ApiError, match='no matches for kind "Kustomization" in version "kustomize.toolkit.fluxcd.io/v1"'
    ):
        bare.create(kustomization())
    bare.install_bundle("flux")
    bare.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    code, body, _headers = http(bare, "POST", KS_PATH, kustomization())
    assert code == 201 and body["metadata"]["uid"]
    # discovery now serves the group, all its versions
    code, groups, _headers = http(bare, "GET", "/apis")
    versions = {g["name"]: [v["version"] for v in g["versions"]] for g in groups["groups"]}
    assert versions["source.toolkit.fluxcd.io"][0] == "v1" and "v1beta2" in versions["source.toolkit.fluxcd.io"]
    for group in groups["groups"]:  # every advertised version answers (clients walk them all)
        for version in group["versions"]:
            code, listed, _headers = http(bare, "GET", "/apis/" + version["groupVersion"])
            assert code == 200 and listed["resources"], version["groupVersion"]
    # deleting the CRD deletes its objects and stops serving the resource
    bare.remove("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kustomizations.kustomize.toolkit.fluxcd.io")
    code, body, _headers = http(bare, "GET", KS_PATH + "/apps")
    assert code == 404
    assert not [k for k in bare.objects if k[0] == "kustomize.toolkit.fluxcd.io"]


def test_wrong_type_and_missing_required_field_are_invalid(api):
    bad = kustomization(prune="yes")
    del bad["spec"]["interval"]
    code, body, _headers = http(api, "POST", KS_PATH, bad)
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'Kustomization.kustomize.toolkit.fluxcd.io "apps" is invalid: [spec.interval: Required '
        'value, spec.prune: Invalid value: "string": spec.prune in body must be of type '
        'boolean: "string"]'
    )
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.interval"},
        {
            "reason": "FieldValueTypeInvalid",
            "field": "spec.prune",
            "message": 'Invalid value: "string": spec.prune in body must be of type boolean: "string"',
        },
    ]
    assert not api.exists(KS, "Kustomization", "apps", "flux-system")


def test_enum_violation_lists_the_supported_values(api):
    bad = kustomization()
    bad["spec"]["sourceRef"]["kind"] = "HelmRepository"
    code, body, _headers = http(api, "POST", KS_PATH, bad)
    assert code == 422
    cause = body["details"]["causes"][0]
    assert cause["field"] == "spec.sourceRef.kind" and cause["reason"] == "FieldValueNotSupported"
    assert cause["message"].startswith('Unsupported value: "HelmRepository": supported values: "OCIRepository"')


def test_unknown_fields_follow_field_validation(api):
    bad = kustomization()
    bad["spec"]["sourceRef"]["bogus"] = 1
    code, body, _headers = http(api, "POST", KS_PATH + "?fieldValidation=Strict", bad)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Kustomization in version "v1" cannot be handled as a Kustomization: strict decoding '
        'error: unknown field "spec.sourceRef.bogus"'
    )
    # Warn (the server default) stores the object without the field and says so in a Warning header
    code, body, headers = http(api, "POST", KS_PATH, bad)
    assert code == 201 and "bogus" not in body["spec"]["sourceRef"]
    assert headers.get("Warning") == '299 - "unknown field \\"spec.sourceRef.bogus\\""'


def test_server_side_apply_refuses_unknown_fields_whatever_the_directive(api):
    bad = kustomization()
    bad["spec"]["wat"] = True
    code, body, _headers = http(
        api, "PATCH", KS_PATH + "/apps?fieldManager=krops&fieldValidation=Ignore", bad, "application/apply-patch+yaml"
    )
    assert code == 500
    assert body["message"].endswith("Kind=Kustomization): .spec.wat: field not declared in schema")


def test_apply_needs_a_field_manager(api):
    code, body, _headers = http(api, "PATCH", KS_PATH + "/apps", kustomization(), "application/apply-patch+yaml")
    assert (code, body["reason"]) == (422, "Invalid")
    assert (
        body["message"]
        == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )


def test_field_managers_conflict_force_and_release_fields(api):
    path = KS_PATH + "/apps?fieldManager=%s"
    code, body, _headers = http(
        api, "PATCH", path % "kustomize-controller", kustomization(suspend=False), "application/apply-patch+yaml"
    )
    assert code == 200 and body["metadata"]["managedFields"][0]["manager"] == "kustomize-controller"
    code, body, _headers = http(
        api, "PATCH", path % "someone", kustomization(suspend=True), "application/apply-patch+yaml"
    )
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "kustomize-controller": .spec.suspend'
    assert body["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "field": ".spec.suspend", "message": 'conflict with "kustomize-controller"'}
    ]
    code, body, _headers = http(
        api, "PATCH", path % "someone" + "&force=true", kustomization(suspend=True), "application/apply-patch+yaml"
    )
    assert code == 200 and body["spec"]["suspend"] is True
    owners = {e["manager"]: e["fieldsV1"]["f:spec"] for e in body["metadata"]["managedFields"]}
    assert "f:suspend" in owners["someone"] and "f:suspend" not in owners["kustomize-controller"]
    assert "f:interval" in owners["kustomize-controller"]  # equal values stay shared
    # a manager that stops applying a field it alone owns removes it
    code, body, _headers = http(api, "PATCH", path % "someone", kustomization(), "application/apply-patch+yaml")
    assert code == 200 and "suspend" not in body["spec"]


def test_the_same_apply_again_changes_nothing_but_drift_is_applied_over(api):
    """An apply repeated on the object it produced is a no-op (the emulator answers it from a memo); once
    someone else changed the object, the same apply acts again: conflicts, force, validation."""
    res = api.resource_for(KS, "Kustomization")

    def apply(body, manager="kustomize-controller", force=False):
        return api.patch(res, "flux-system", "apps", "apply", body, None, manager, "Strict", force)

    apply(kustomization(suspend=False))
    first = apply(kustomization(suspend=False))
    assert apply(kustomization(suspend=False)) == first
    assert api._last_rv == int(first["metadata"]["resourceVersion"])
    api.patch(res, "flux-system", "apps", "merge", {"spec": {"suspend": True}}, None, "kubectl-edit")
    with pytest.raises(ApiError) as refused:
        apply(kustomization(suspend=False))
    assert refused.value.code == 409
    assert re.fullmatch(
        r'Apply failed with 1 conflict: conflict with "kubectl-edit" using kustomize.toolkit.fluxcd.io/v1 '
        r"at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: .spec.suspend",
        refused.value.message,
    ), refused.value.message
    forced = apply(kustomization(suspend=False), force=True)
    assert forced["spec"]["suspend"] is False
    assert int(forced["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert apply(kustomization(suspend=False), force=True) == forced
    # a configuration the schema refuses is refused, however often it was applied before it went wrong
    bad = kustomization(suspend=False, interval=5)
    for _attempt in range(2):
        with pytest.raises(ApiError) as invalid:
            apply(bad, force=True)
        assert invalid.value.code == 422
    assert api.get(KS, "Kustomization", "apps", "flux-system") == forced


def test_the_same_apply_a_second_later_after_a_status_write_is_still_a_no_op(api, monkeypatch):
    """kube-apiserver keeps managedFields sorted (operation, time, manager: apimachinery's
    sortEncodedManagedFields) and an unchanged apply keeps its entry's time, so applying the same object again,
    after another manager's status write and in a later second, stores nothing and bumps no resourceVersion
    (kustomize-controller re-applies at every interval)."""
    from tests.substrate import strict_api

    res = api.resource_for(KS, "Kustomization")
    seconds = iter(range(10, 60))
    monkeypatch.setattr(strict_api, "_now", lambda: "2026-12-04T21:00:%02dZ" % next(seconds))

    def apply():
        return api.patch(res, "flux-system", "apps", "apply", kustomization(), None, "kustomize-controller")

    apply()
    status = {"status": {"observedGeneration": 1}}
    written = api.patch(res, "flux-system", "apps", "merge", status, "status", "kustomize-controller")
    assert [(e["operation"], e.get("subresource")) for e in written["metadata"]["managedFields"]] == [
        ("Apply", None),
        ("Update", "status"),
    ]
    again = apply()
    assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == written["metadata"]["managedFields"]


def test_stale_resource_version_is_a_conflict(api):
    created = api.create(kustomization())
    api.patch(api.resource_for(KS, "Kustomization"), "flux-system", "apps", "merge", {"spec": {"suspend": True}})
    stale = dict(created, spec=dict(created["spec"], suspend=False))
    code, body, _headers = http(api, "PUT", KS_PATH + "/apps", stale)
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on kustomizations.kustomize.toolkit.fluxcd.io "apps": the '
        "object has been modified; please apply your changes to the latest version and try again"
    )
    stale["metadata"].pop("resourceVersion")
    code, body, _headers = http(api, "PUT", KS_PATH + "/apps", stale)
    assert code == 422
    assert body["message"].endswith("metadata.resourceVersion: Invalid value: 0: must be specified for an update")


def test_namespace_must_exist_and_not_be_terminating(api):
    code, body, _headers = http(
        api, "POST", "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/nope/kustomizations", kustomization()
    )
    assert (code, body["message"]) == (404, 'namespaces "nope" not found')
    held = kustomization("held")
    held["metadata"]["finalizers"] = ["finalizers.fluxcd.io"]
    api.create(held)
    api.remove("v1", "Namespace", "flux-system")
    assert api.get("v1", "Namespace", "flux-system")["status"]["phase"] == "Terminating"
    code, body, _headers = http(api, "POST", KS_PATH, kustomization("late"))
    assert (code, body["reason"]) == (403, "Forbidden")
    assert body["message"] == "unable to create new content in namespace flux-system because it is being terminated"
    api.clear_finalizers(KS, "Kustomization", "held", "flux-system")
    assert not api.exists("v1", "Namespace", "flux-system")


def test_finalizers_hold_deletion_and_cannot_be_added_while_deleting(api):
    held = kustomization()
    held["metadata"]["finalizers"] = ["finalizers.fluxcd.io"]
    api.create(held)
    code, body, _headers = http(api, "DELETE", KS_PATH + "/apps")
    assert code == 200 and body["metadata"]["deletionTimestamp"]
    code, body, _headers = http(
        api,
        "PATCH",
        KS_PATH + "/apps",
        {"metadata": {"finalizers": ["finalizers.fluxcd.io", "other.example/x"]}},
        "application/merge-patch+json",
    )
    assert code == 422
    assert (
        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new "
        'finalizers []string{"other.example/x"}' in body["message"]
    )
    api.clear_finalizers(KS, "Kustomization", "apps", "flux-system")
    assert not api.exists(KS, "Kustomization", "apps", "flux-system")


def test_owner_references_garbage_collection(api):
    owner = api.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "flux-system"}}
    )
    other = api.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "flux-system"}}
    )

    def ref(obj):
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}

    for name, refs in (("child", [ref(owner)]), ("shared", [ref(owner), ref(other)]), ("orphan-me", [ref(other)])):
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": "flux-system", "ownerReferences": refs},
            }
        )
    decoy = api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "decoy", "namespace": "flux-system", "ownerReferences": [dict(ref(owner), uid="x")]},
        }
    )
    code, _body, _headers = http(api, "DELETE", "/api/v1/namespaces/flux-system/configmaps/owner")
    assert code == 200
    assert not api.exists("v1", "Secret", "child", "flux-system")
    assert api.get("v1", "Secret", "shared", "flux-system")["metadata"]["ownerReferences"] == [ref(other)]
    assert api.exists("v1", "Secret", "decoy", "flux-system") and decoy
    code, _body, _headers = http(
        api,
        "DELETE",
        "/api/v1/namespaces/flux-system/configmaps/other",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"},
    )
    assert code == 200
    assert "ownerReferences" not in api.get("v1", "Secret", "orphan-me", "flux-system")["metadata"]


def test_foreground_deletion_waits_for_dependents(api):
    owner = api.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "flux-system"}}
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "held",
                "namespace": "flux-system",
                "finalizers": ["example.com/hold"],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
        }
    )
    code, body, _headers = http(
        api, "DELETE", "/api/v1/namespaces/flux-system/configmaps/owner?propagationPolicy=Foreground"
    )
    assert code == 200 and "foregroundDeletion" in body["metadata"]["finalizers"]
    assert api.exists("v1", "ConfigMap", "owner", "flux-system")
    api.clear_finalizers("v1", "Secret", "held", "flux-system")
    assert not api.exists("v1", "Secret", "held", "flux-system")
    assert not api.exists("v1", "ConfigMap", "owner", "flux-system")


def test_built_in_kinds_are_validated_too(api):
    code, body, _headers = http(
        api,
        "POST",
        "/api/v1/namespaces/flux-system/configmaps?fieldValidation=Strict",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": 1}, "dat": {}},
    )
    assert code == 400 and 'unknown field "dat"' in body["message"]
    code, body, _headers = http(
        api,
        "POST",
        "/api/v1/namespaces/flux-system/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": 1}},
    )
    assert code == 422 and body["details"]["causes"][0]["field"] == "data.a"


def test_kubernetes_client_works_against_it(api):
    from kubernetes import client, config
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(config.new_client_from_config(api.kubeconfig_path))
    resource = dyn.resources.get(api_version=KS, kind="Kustomization")
    resource.create(body=kustomization(), namespace="flux-system")
    listed = resource.get(namespace="flux-system")
    assert [i.metadata.name for i in listed.items] == ["apps"]
    with pytest.raises(Exception) as caught:
        resource.create(body=kustomization("bad", prune="no"), namespace="flux-system")
    assert getattr(caught.value, "status", None) == 422
    assert client  # imported for the configuration side effect only


def test_cel_rules_of_the_crds_are_enforced(strict_cluster):
    api = strict_cluster("cel", bundles=("flux-operator", "flux"))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    code, body, _headers = http(
        api,
        "POST",
        "/apis/fluxcd.controlplane.io/v1/namespaces/flux-system/fluxinstances",
        {
            "apiVersion": "fluxcd.controlplane.io/v1",
            "kind": "FluxInstance",
            "metadata": {"name": "other"},
            "spec": {"distribution": {"version": "2.x", "registry": "ghcr.io/fluxcd"}},
        },
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'FluxInstance.fluxcd.controlplane.io "other" is invalid: <nil>: Invalid value: "object": '
        "the only accepted name for a FluxInstance is 'flux'"
    )
    both = {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "x"},
        "spec": {
            "interval": "1m",
            "chartRef": {"kind": "OCIRepository", "name": "x"},
            "chart": {"spec": {"chart": "x", "sourceRef": {"kind": "HelmRepository", "name": "x"}}},
        },
    }
    code, body, _headers = http(
        api, "POST", "/apis/helm.toolkit.fluxcd.io/v2/namespaces/flux-system/helmreleases", both
    )
    assert code == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": 'Invalid value: "object": either chart or chartRef must be set',
        }
    ]
    del both["spec"]["chart"]
    code, _body, _headers = http(
        api, "POST", "/apis/helm.toolkit.fluxcd.io/v2/namespaces/flux-system/helmreleases", both
    )
    assert code == 201


def test_a_crd_version_serves_the_same_objects_in_its_own_apiversion(strict_cluster):
    api = strict_cluster("versions", bundles=("flux",))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    repo = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "r", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": "https://x"},
    }
    code, _body, _headers = http(
        api, "POST", "/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/gitrepositories", repo
    )
    assert code == 201
    code, body, _headers = http(
        api, "GET", "/apis/source.toolkit.fluxcd.io/v1beta2/namespaces/flux-system/gitrepositories/r"
    )
    assert code == 200 and body["apiVersion"] == "source.toolkit.fluxcd.io/v1beta2"
    code, body, _headers = http(
        api, "GET", "/apis/source.toolkit.fluxcd.io/v1beta2/namespaces/flux-system/gitrepositories"
    )
    assert [i["apiVersion"] for i in body["items"]] == ["source.toolkit.fluxcd.io/v1beta2"]
    code, body, _headers = http(
        api, "GET", "/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/gitrepositories/nope"
    )
    assert (code, body["reason"]) == (404, "NotFound")


def test_rollback_drops_the_events_written_after_the_savepoint_by_resource_version(api):
    """rollback() cuts the event history at the savepoint's resourceVersion, not at the history's length then: the
    history can be trimmed or replaced meanwhile (``_restore``; a watch cache compacting its oldest events), and a cut
    by length then keeps events written after the savepoint (a watch would replay changes that were rolled back) or
    drops older ones."""

    def configmap(name):
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "flux-system"}}

    api.create(configmap("before"))
    history = api.events  # the list watchers read: rollback cuts it in place
    before = list(api.events)
    point = api.savepoint()
    api.create(configmap("after-1"))
    api.create(configmap("after-2"))
    api.rollback(point)
    assert api.events is history
    assert api.events == before  # exactly the events after the savepoint are gone

    point = api.savepoint()
    api.create(configmap("after-3"))
    api.create(configmap("after-4"))
    del api.events[:2]  # the two oldest events trimmed between savepoint and rollback
    api.rollback(point)
    assert api.events == before[2:]
    assert not api.exists("v1", "ConfigMap", "after-3", "flux-system")
