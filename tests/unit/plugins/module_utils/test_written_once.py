# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Every verb and fact once (issue 24, item 5): each is defined in one place of plugins/ and the places that
need it read it there, so two copies cannot drift apart again. The list, and where each lives:

- the cluster-api-operator provider kinds and the order teardown deletes them in: capi.PROVIDER_KINDS and
  capi.PROVIDER_DELETE_ORDER (teardown once deleted 5 of the 7 kinds);
- the served Cluster resource: capi.cluster_resource;
- kubeconfig export and merge: kubeconfigs.render_kubeconfig and merge_kubeconfig (kind's merge switches the
  current context, capi_pivot's keeps the user's: one function, ``switch_context``);
- the Flux suspend patch: kube.suspend_patch (the pivot's and the teardown's, each marking its suspender);
- node readiness: kube.node_states (kind_cluster's wait and the pivot's);
- the chart each bootstrap.toml [charts] key pins: config_types.CHART_NAMES (airgap's BOOTSTRAP_CHARTS is it,
  validate's CHART_PINS its inverse, the pivot's CHARTS rows name the same charts);
- the run tag keys: ownership.RUN_TAG_KEYS (flux writes them, the GCP-safe label keys are derived from them).

A stdlib ``ast`` walk, like test_shape.py and test_error_tree.py.
"""

from __future__ import annotations

import ast
import pathlib

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"

# name defined at module level (a function or an assignment) -> the one file that defines it
ONCE = {
    "PROVIDER_KINDS": "module_utils/capi.py",
    "PROVIDER_DELETE_ORDER": "module_utils/capi.py",
    "cluster_resource": "module_utils/capi.py",
    "render_kubeconfig": "module_utils/kubeconfigs.py",
    "merge_kubeconfig": "module_utils/kubeconfigs.py",
    "write_kubeconfig": "module_utils/kubeconfigs.py",
    "suspend_patch": "module_utils/kube.py",
    "node_states": "module_utils/kube.py",
    "CHART_NAMES": "module_utils/config_types.py",
    "RUN_TAG_KEYS": "module_utils/ownership.py",
}
# (name, file) -> what that definition must call or read: derived from the one definition, on purpose (the
# delete order's kinds; the filter and the pivot's export wrap the one render, each wording its own error)
DERIVED = {
    ("PROVIDER_KINDS", "module_utils/teardown.py"): "capi.PROVIDER_DELETE_ORDER",
    ("render_kubeconfig", "filter/render_kubeconfig.py"): "kubeconfigs.render_kubeconfig(",
    ("render_kubeconfig", "module_utils/pivot/export.py"): "kubeconfigs.render_kubeconfig(",
    ("RUN_TAG_KEYS", "module_utils/flux.py"): "ownership.RUN_TAG_KEYS",
}


def _sources():
    return {str(p.relative_to(PLUGINS)): p.read_text(encoding="utf-8") for p in sorted(PLUGINS.rglob("*.py"))}


def definitions(sources):
    """{name: [(file, source of the definition)]} of module-level functions and assignments named in ONCE."""
    found = {}
    for where, text in sources.items():
        for node in ast.parse(text, where).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in names:
                if name in ONCE:
                    found.setdefault(name, []).append((where, ast.get_source_segment(text, node) or ""))
    return found


def suspend_literals(sources):
    """Files outside kube.py that write a ``{"spec": {"suspend": ...}}`` patch of their own."""
    out = []
    for where, text in sources.items():
        for node in ast.walk(ast.parse(text, where)):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "spec"
                    and isinstance(value, ast.Dict)
                    and any(isinstance(k, ast.Constant) and k.value == "suspend" for k in value.keys)
                    and where != "module_utils/kube.py"
                ):
                    out.append(f"{where}:{node.lineno}")
    return out


def problems(sources):
    out = []
    for name, places in sorted(definitions(sources).items()):
        for where, text in places:
            if where == ONCE[name]:
                continue
            derived = DERIVED.get((name, where))
            if derived is None or derived not in text:
                out.append(f"{name} is defined again in {where}; read it from {ONCE[name]}")
    missing = sorted(set(ONCE) - set(definitions(sources)))
    out += [f"{name} is not defined in {ONCE[name]}" for name in missing]
    out += [
        f"{where}: a suspend patch of its own; build it with kube.suspend_patch" for where in suspend_literals(sources)
    ]
    return out


def test_every_verb_and_fact_is_defined_once():
    assert problems(_sources()) == []


def test_the_walk_sees_a_second_copy_and_a_hand_written_suspend():
    sources = {
        "module_utils/capi.py": "PROVIDER_KINDS = ('CoreProvider',)\nPROVIDER_DELETE_ORDER = ()\n",
        "module_utils/validate.py": "PROVIDER_KINDS = ('CoreProvider',)\n",
        "module_utils/teardown.py": "PROVIDER_KINDS = tuple(r[0] for r in capi.PROVIDER_DELETE_ORDER)\n",
        "module_utils/flux.py": "def pause():\n    return patch({'spec': {'suspend': True}})\n",
        "module_utils/kube.py": "def suspend_patch(s):\n    return {'spec': {'suspend': s}}\ndef node_states(o):\n    pass\n",
    }
    assert problems(sources) == [
        "PROVIDER_KINDS is defined again in module_utils/validate.py; read it from module_utils/capi.py",
        "CHART_NAMES is not defined in module_utils/config_types.py",
        "RUN_TAG_KEYS is not defined in module_utils/ownership.py",
        "cluster_resource is not defined in module_utils/capi.py",
        "merge_kubeconfig is not defined in module_utils/kubeconfigs.py",
        "render_kubeconfig is not defined in module_utils/kubeconfigs.py",
        "write_kubeconfig is not defined in module_utils/kubeconfigs.py",
        "module_utils/flux.py:2: a suspend patch of its own; build it with kube.suspend_patch",
    ]


def test_the_delete_order_holds_every_provider_kind_once():
    from ansible_collections.krops.platform.plugins.module_utils import capi, teardown

    kinds = [kind for kind, _label in capi.PROVIDER_DELETE_ORDER]
    assert sorted(kinds) == sorted(capi.PROVIDER_KINDS) and len(set(kinds)) == len(kinds)
    assert kinds[0] == "AddonProvider" and kinds[-1] == "CoreProvider"  # add-ons first, core last
    assert teardown.PROVIDER_KINDS == tuple(kinds)


# clusterctl's provider types (cluster-api cmd/clusterctl/api/v1alpha3/provider_type.go, GetProviderType, @ ae7ff04):
# the cluster-api-operator serves one provider kind for each (api/v1alpha2/*provider_types.go)
CLUSTERCTL_PROVIDER_TYPES = {
    "CoreProvider",
    "BootstrapProvider",
    "InfrastructureProvider",
    "ControlPlaneProvider",
    "IPAMProvider",
    "RuntimeExtensionProvider",
    "AddonProvider",
}


def test_every_clusterctl_provider_type_is_a_provider_kind_and_capi_provider_delete_has_a_row_for_each():
    """The fact the teardown once held twice (7 kinds in kube.py, 5 in teardown.py, IPAM and runtime-extension
    providers never deleted): one table, capi.PROVIDER_DELETE_ORDER, that the provider rows are built from."""
    from ansible_collections.krops.platform.plugins.module_utils import capi, kube_rows
    from ansible_collections.krops.platform.plugins.modules import capi_provider_delete

    assert set(capi.PROVIDER_KINDS) == CLUSTERCTL_PROVIDER_TYPES
    order = [kind for kind, _label in capi.PROVIDER_DELETE_ORDER]
    rows = kube_rows._provider_rows(capi.PROVIDER_GROUP + "/v1alpha2", capi.PROVIDER_KINDS)
    assert [row.name for row in rows] == order
    assert [row.after for row in rows] == [()] + [(kind,) for kind in order[:-1]]  # each kind after the one before
    options = capi_provider_delete.argument_spec()["kinds"]
    assert options["choices"] == options["default"] == order
    # a subset of the kinds keeps the order, whatever order it is given in
    assert [r.name for r in kube_rows._provider_rows("x/v1", ["CoreProvider", "AddonProvider"])] == [
        "AddonProvider",
        "CoreProvider",
    ]


def test_node_readiness_needs_a_node_and_every_node_ready():
    from ansible_collections.krops.platform.plugins.module_utils import kube

    def node(name, status, generation=None):
        meta = {"name": name, **({"generation": generation} if generation else {})}
        return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": status, "reason": "R"}]}}

    assert kube.node_states({}) == (False, [])
    ready, nodes = kube.node_states({("", "b"): node("b", "True"), ("", "a"): node("a", "False")})
    assert not ready and [(n["name"], n["ready"]) for n in nodes] == [("a", False), ("b", True)]
    assert kube.node_states({("", "a"): node("a", "True")})[0] is True


def test_the_chart_of_each_charts_key_is_one_table():
    """airgap packs, validate checks and the pivot installs the charts the [charts] keys pin: the same charts."""
    from ansible_collections.krops.platform.plugins.module_utils import airgap_tables, config_types
    from ansible_collections.krops.platform.plugins.module_utils import validate_bootstrap
    from ansible_collections.krops.platform.plugins.module_utils.pivot import common as pivot_common

    names = config_types.CHART_NAMES
    assert sorted(names) == sorted(config_types.fields_of(config_types.Charts))  # every [charts] key, no other
    assert airgap_tables.BOOTSTRAP_CHARTS is names
    assert validate_bootstrap.CHART_PINS == {
        "cert-manager": "cert-manager",
        "cluster-api-operator": "capi-operator",
        "flux-operator": "flux-operator",
        "flux-instance": "flux-operator",
    }
    # the pivot's rows: [charts] key -> (release, chart, repository, namespace, values)
    assert {key: row[1] for key, row in pivot_common.CHARTS.items()} == {
        key: chart for key, chart in names.items() if key in pivot_common.CHARTS
    }
