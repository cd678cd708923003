# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `helm` v4.2.4 stand-in that acts on an emulated cluster (run as `python helm.py ARGS...` or installed
with lifecycle.install_standin).

Every argv goes through tool_contracts.check_helm first (helm v4.2.4's commands and flags: an unknown
flag fails as helm fails, a chart version that was never published fails like the registry answers).
Then only what krops and kubernetes.core.helm call: ``version``, ``list`` (--namespace, --filter,
--output json|yaml, --deployed), ``upgrade --install RELEASE CHART --version V`` (--create-namespace,
--wait, --timeout), ``uninstall RELEASE`` (--wait, --timeout, --ignore-not-found), ``get values``,
each with --kubeconfig / --kube-context or kubernetes.core's HELM_NAMESPACE / HELM_KUBECONTEXT /
KUBECONFIG. Like Helm it keeps a release as a Secret ``sh.helm.release.v1.<release>.v<revision>``
(type helm.sh/release.v1, labels owner=helm, name, status, version) in the release namespace, so state
lives in the cluster. Installing a chart creates the CRDs it ships (flux_world.CHART_CRDS over
strict_api.CRD_BUNDLES); uninstalling leaves them, as Helm leaves CRDs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import yaml  # noqa: E402
from common import Cluster, exit_with, record  # noqa: E402

from tests.substrate import tool_contracts as contracts  # noqa: E402


def fail(message):
    exit_with(f"Error: {message}")


def option(flags, *names, env=None, default=None):
    for name in names:
        if name in flags:
            return flags[name]
    return os.environ.get(env) if env and os.environ.get(env) else default


def cluster(flags):
    return Cluster(option(flags, "--kubeconfig"), option(flags, "--kube-context", env="HELM_KUBECONTEXT"), fail=fail)


def namespace_of(flags):
    return option(flags, "--namespace", "-n", env="HELM_NAMESPACE", default="default")


def releases(api, namespace):
    _code, listed = api.call("GET", f"/api/v1/namespaces/{namespace}/secrets?labelSelector=owner%3Dhelm")
    found = {}
    for secret in listed.get("items") or []:
        labels = secret["metadata"].get("labels") or {}
        record_ = json.loads(base64.b64decode(secret["data"]["release"]))
        if labels.get("name") and int(labels.get("version", 0)) >= found.get(labels["name"], {}).get("revision", 0):
            found[labels["name"]] = record_
    return found


def cmd_version(positional, flags):
    if "--short" in flags:
        print("v%s+g0000000" % contracts.HELM_VERSION)
    else:
        print(
            'version.BuildInfo{Version:"v%s", GitCommit:"0000000000000000000000000000000000000000", '
            'GitTreeState:"clean", GoVersion:"go1.25.0", KubeClientVersion:"v1.35"}' % contracts.HELM_VERSION
        )


def cmd_list(positional, flags):
    namespace = namespace_of(flags)
    pattern = re.compile(option(flags, "--filter", "-f", default=".*"))
    rows = [r for name, r in sorted(releases(cluster(flags), namespace).items()) if pattern.search(name)]
    if "--deployed" in flags:
        rows = [r for r in rows if r["status"] == "deployed"]
    output = option(flags, "--output", "-o", default="table")
    if output == "json":
        print(json.dumps(rows))
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(rows))
    else:
        print("NAME\tNAMESPACE\tREVISION\tUPDATED\tSTATUS\tCHART\tAPP VERSION")
        for row in rows:
            print(
                "\t".join(
                    str(row[k]) for k in ("name", "namespace", "revision", "updated", "status", "chart", "app_version")
                )
            )


def cmd_upgrade(positional, flags):
    if "--install" not in flags and "-i" not in flags:
        fail("upgrade without --install is not emulated")
    release, chart = positional
    version = flags.get("--version")
    if not version:
        fail("a chart version is required here (--version); krops pins every chart")
    namespace = namespace_of(flags)
    api = cluster(flags)
    code, _ns = api.call("GET", f"/api/v1/namespaces/{namespace}", ok=(200, 404))
    if code == 404:
        if "--create-namespace" not in flags:
            fail(f'create: failed to create: namespaces "{namespace}" not found')
        api.call(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    from tests.substrate.flux_world import CHART_CRDS  # heavy imports: only an install needs them
    from tests.substrate.strict_api import catalog

    chart_name = chart.rstrip("/").rpartition("/")[2]
    for bundle in CHART_CRDS.get(chart_name, ()):
        for crd in catalog().bundle(bundle):
            api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
    previous = releases(api, namespace).get(release)
    revision = (previous or {}).get("revision", 0) + 1
    record_ = {
        "name": release,
        "namespace": namespace,
        "revision": revision,
        "updated": "1970-01-01 00:00:00 +0000 UTC",
        "status": "deployed",
        "chart": f"{chart_name}-{version}",
        "app_version": version.lstrip("v"),
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": "sh.helm.release.v1.%s.v%d" % (release, revision),
            "namespace": namespace,
            "labels": {"owner": "helm", "name": release, "status": "deployed", "version": str(revision)},
        },
        "data": {"release": base64.b64encode(json.dumps(record_).encode()).decode()},
    }
    api.call("POST", f"/api/v1/namespaces/{namespace}/secrets", secret)
    if previous:
        old = "sh.helm.release.v1.%s.v%d" % (release, previous["revision"])
        api.call(
            "PATCH", f"/api/v1/namespaces/{namespace}/secrets/{old}", {"metadata": {"labels": {"status": "superseded"}}}
        )
    print('Release "{}" has been {}. Happy Helming!'.format(release, "upgraded" if previous else "installed"))


def cmd_uninstall(positional, flags):
    namespace = namespace_of(flags)
    api = cluster(flags)
    for release in positional:
        _code, listed = api.call(
            "GET", f"/api/v1/namespaces/{namespace}/secrets?labelSelector=owner%3Dhelm%2Cname%3D{release}"
        )
        items = listed.get("items") or []
        if not items:
            if "--ignore-not-found" in flags:
                continue
            fail(f"uninstall: Release not loaded: {release}: release: not found")
        for secret in items:
            api.call("DELETE", "/api/v1/namespaces/{}/secrets/{}".format(namespace, secret["metadata"]["name"]))
        print(f'release "{release}" uninstalled')


def cmd_get_values(positional, flags):
    if positional[0] not in releases(cluster(flags), namespace_of(flags)):
        fail("release: not found")
    output = option(flags, "--output", "-o", default="table")
    print("null" if output == "yaml" else ("{}" if output == "json" else "USER-SUPPLIED VALUES:\nnull"))


COMMANDS = {
    ("version",): cmd_version,
    ("list",): cmd_list,
    ("upgrade",): cmd_upgrade,
    ("uninstall",): cmd_uninstall,
    ("get", "values"): cmd_get_values,
}


def main(argv):
    record("helm", argv)
    try:
        command, positional, flags = contracts.check_helm(argv)
    except contracts.Refused as exc:
        exit_with(str(exc), exc.rc)
    handler = COMMANDS.get(command)
    if handler is None:
        fail('helm stand-in: "{}" is not emulated'.format(" ".join(command)))
    handler(positional, flags)


if __name__ == "__main__":
    main(sys.argv[1:])
