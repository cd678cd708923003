# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `helm` stand-in that acts on an emulated cluster (run as `python helm.py ARGS...`).

Only what krops calls: ``list --namespace NS --filter REGEX --output json`` and
``upgrade --install RELEASE CHART --version V --namespace NS [--create-namespace] [--wait]
[--timeout T]``, each with ``--kubeconfig`` / ``--kube-context``. Like Helm 3 it keeps a release
as a Secret ``sh.helm.release.v1.<release>.v<revision>`` (type helm.sh/release.v1, labels owner=helm,
name, status, version) in the release namespace, so state lives in the cluster. Installing a
chart creates the CRDs it ships (flux_world.CHART_CRDS over strict_api.CRD_BUNDLES). Unknown
commands or flags fail as helm does: "Error: unknown flag: --x", exit 1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections")]

from tests.substrate.flux_world import CHART_CRDS  # noqa: E402
from tests.substrate.strict_api import catalog  # noqa: E402

VALUE_FLAGS = {
    "--namespace",
    "-n",
    "--filter",
    "--output",
    "-o",
    "--version",
    "--timeout",
    "--kubeconfig",
    "--kube-context",
}
BOOL_FLAGS = {"--install", "-i", "--create-namespace", "--wait"}


def fail(message):
    sys.stderr.write(f"Error: {message}\n")
    sys.exit(1)


def parse(argv):
    positional, flags = [], {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg.startswith("-"):
            name, _eq, value = arg.partition("=")
            if name in VALUE_FLAGS:
                if not value:
                    index += 1
                    if index >= len(argv):
                        fail(f"flag needs an argument: {name}")
                    value = argv[index]
                flags[name.lstrip("-")] = value
            elif name in BOOL_FLAGS:
                flags[name.lstrip("-")] = True
            else:
                fail(f"unknown flag: {name}")
        else:
            positional.append(arg)
        index += 1
    return positional, flags


class Cluster:
    def __init__(self, kubeconfig, context):
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            with open(path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except OSError as exc:
            fail(f"Kubernetes cluster unreachable: {exc}")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        name = context or config.get("current-context")
        if name not in contexts:
            fail(f'Kubernetes cluster unreachable: context "{name}" does not exist')
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        self.server = clusters[contexts[name]["cluster"]]["server"].rstrip("/")

    def call(self, method, path, body=None, ok=(200, 201)):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json",
                "User-Agent": "Helm/3.18.0",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            payload = json.loads(exc.read() or b"{}")
            if exc.code in ok:
                return exc.code, payload
            fail("{} {}: {}".format(method, path, payload.get("message", exc.code)))
        except OSError as exc:
            fail(f"Kubernetes cluster unreachable: {exc}")

    def releases(self, namespace):
        _code, listed = self.call("GET", f"/api/v1/namespaces/{namespace}/secrets?labelSelector=owner%3Dhelm")
        found = {}
        for secret in listed.get("items") or []:
            labels = secret["metadata"].get("labels") or {}
            record = json.loads(base64.b64decode(secret["data"]["release"]))
            if labels.get("name") and int(labels.get("version", 0)) >= found.get(labels["name"], {}).get("revision", 0):
                found[labels["name"]] = record
        return found


def cmd_list(positional, flags):
    namespace = flags.get("namespace") or flags.get("n") or "default"
    cluster = Cluster(flags.get("kubeconfig"), flags.get("kube-context"))
    pattern = re.compile(flags.get("filter") or ".*")
    rows = [r for name, r in sorted(cluster.releases(namespace).items()) if pattern.search(name)]
    if (flags.get("output") or flags.get("o")) == "json":
        print(json.dumps(rows))
    else:
        print("NAME\tNAMESPACE\tREVISION\tUPDATED\tSTATUS\tCHART\tAPP VERSION")
        for row in rows:
            print(
                "\t".join(
                    [
                        row["name"],
                        row["namespace"],
                        str(row["revision"]),
                        row["updated"],
                        row["status"],
                        row["chart"],
                        row["app_version"],
                    ]
                )
            )


def cmd_upgrade(positional, flags):
    if not flags.get("install") and not flags.get("i"):
        fail("upgrade without --install is not emulated")
    if len(positional) != 2:
        fail('"helm upgrade" requires 2 arguments')
    release, chart = positional
    version = flags.get("version")
    if not version:
        fail("a chart version is required here (--version); krops pins every chart")
    namespace = flags.get("namespace") or flags.get("n") or "default"
    cluster = Cluster(flags.get("kubeconfig"), flags.get("kube-context"))
    code, _ns = cluster.call("GET", f"/api/v1/namespaces/{namespace}", ok=(200, 404))
    if code == 404:
        if not flags.get("create-namespace"):
            fail(f'create: failed to create: namespaces "{namespace}" not found')
        cluster.call(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    chart_name = chart.rstrip("/").rpartition("/")[2]
    for bundle in CHART_CRDS.get(chart_name, ()):
        for crd in catalog().bundle(bundle):
            cluster.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
    previous = cluster.releases(namespace).get(release)
    revision = (previous or {}).get("revision", 0) + 1
    record = {
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
        "data": {"release": base64.b64encode(json.dumps(record).encode()).decode()},
    }
    cluster.call("POST", f"/api/v1/namespaces/{namespace}/secrets", secret)
    if previous:
        old = "sh.helm.release.v1.%s.v%d" % (release, previous["revision"])
        cluster.call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/secrets/{old}",
            {"metadata": {"labels": {"status": "superseded"}}},
        )
    print('Release "{}" has been {}. Happy Helming!'.format(release, "upgraded" if previous else "installed"))


def main(argv):
    positional, flags = parse(argv)
    if not positional:
        fail("no command given (the stand-in knows: list, upgrade)")
    command = {"list": cmd_list, "ls": cmd_list, "upgrade": cmd_upgrade}.get(positional[0])
    if command is None:
        fail(f'unknown command "{positional[0]}" for "helm"')
    command(positional[1:], flags)


if __name__ == "__main__":
    main(sys.argv[1:])
