"""The kind cluster as a cloud environment's bootstrap leaves it, for teardown tests that start there.

Written once for every environment's teardown test: the namespaces, Flux's Kustomizations, the kind
marker (docs/ownership.md), the Clusters with CAPI's finalizer, the providers, the Secrets and the
run-tags ConfigMap bootstrap writes, and the kind and helm stand-ins answering as after a bootstrap.
"""

from __future__ import annotations

import json
import sys

from tests.substrate.krops_marks import make_kind_marker

CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
CAPI_FINALIZER = "cluster.cluster.x-k8s.io"
PROVIDER_API = "operator.cluster.x-k8s.io/v1alpha2"
SECRETS = ("flux-github-pat", "sops-age")
RUN_TAGS = "krops-run"
HELM_VERSION = 'version.BuildInfo{Version:"v3.17.0", GitCommit:"x", GitTreeState:"clean", GoVersion:"go1.23.0"}\n'

# kind stand-in: records each call like the standard stand-in and, when asked to delete, which Clusters
# the kind API server (the emulator) still holds at that moment.
KIND = """#!{python}
import json, os, sys, urllib.request
here = os.path.dirname(os.path.abspath(__file__))
entry = {{"tool": "kind", "argv": sys.argv[1:], "env": {{}}, "cwd": os.getcwd(), "stdin": ""}}
if sys.argv[1:2] == ["delete"]:
    with urllib.request.urlopen("{url}/apis/cluster.x-k8s.io/v1beta2/clusters", timeout=10) as answer:
        entry["clusters_left"] = sorted(c["metadata"]["name"] for c in json.load(answer)["items"])
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps(entry) + "\\n")
if sys.argv[1:3] == ["get", "clusters"]:
    print("mgmt")
elif sys.argv[1:2] == ["version"]:
    print("kind v0.27.0 go1.23 linux/amd64")
"""


def ensure_namespace(api, name):
    if not api.exists("v1", "Namespace", name):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def make_cluster(api, name, namespace="default"):
    api.create(
        {
            "apiVersion": CLUSTER[0],
            "kind": CLUSTER[1],
            "metadata": {"name": name, "namespace": namespace, "finalizers": [CAPI_FINALIZER]},
            "spec": {},
        }
    )


def make_ks(api, name, namespace="flux-system", suspend=None):
    ensure_namespace(api, namespace)
    spec = {"interval": "10m", "path": "./x", "prune": True, "sourceRef": {"kind": "OCIRepository", "name": "krops"}}
    if suspend is not None:
        spec["suspend"] = suspend
    api.create({"apiVersion": KS[0], "kind": KS[1], "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def helm_release(name):
    """`helm list -o json` for one Flux release, as the teardown reads it."""
    release = {
        "name": name,
        "namespace": "flux-system",
        "revision": "1",
        "status": "deployed",
        "chart": f"{name}-2.5.0",
        "app_version": "2.5.0",
        "updated": "2026-11-30 06:00:00 +0000 UTC",
    }
    return json.dumps([release])


def seed_bootstrapped_kind(
    api,
    environment,
    providers,
    clusters=(),
    kustomizations=("flux-system", "clusters"),
    run_tags=None,
    namespaces=(),
):
    """Fill the kind API server as `environment`'s bootstrap leaves it.

    providers: (kind, namespace, name, version) of the CAPI operator's provider objects; clusters: the
    Cluster names (namespace default); run_tags: the krops-run ConfigMap's data, or None for none.
    """
    for namespace in ("flux-system", *sorted({p[1] for p in providers}), *namespaces):
        ensure_namespace(api, namespace)
    for name in kustomizations:
        make_ks(api, name)
    make_kind_marker(api, environment)
    for name in clusters:
        make_cluster(api, name)
    for kind, namespace, name, version in providers:
        api.create(
            {
                "apiVersion": PROVIDER_API,
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"version": version},
            }
        )
    for name in SECRETS:
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": "flux-system"},
                "type": "Opaque",
                "data": {"x": "eA=="},
            }
        )
    if run_tags is not None:
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": RUN_TAGS, "namespace": "flux-system"},
                "data": run_tags,
            }
        )


def install_bootstrapped_tools(fake_bins, kind_api):
    """kind and helm stand-ins answering as after a bootstrap: one kind cluster mgmt, Flux's two releases."""
    fake_bins.install("kind", KIND.format(python=sys.executable, url=kind_api.url))
    fake_bins.answer("helm", "get values", stdout="null\n")
    fake_bins.answer("helm", "--filter flux-operator", stdout=helm_release("flux-operator"))
    fake_bins.answer("helm", "--filter flux", stdout=helm_release("flux"))
    fake_bins.answer("helm", "version", stdout=HELM_VERSION)
