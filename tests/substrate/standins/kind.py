# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A `kind` v0.32.0 stand-in acting on the emulated host (tests/substrate/lifecycle.py).

Commands: version, get clusters, get nodes, get kubeconfig, create cluster, delete cluster. Every
argv goes through tool_contracts.kind_args (unknown commands and flags fail as kind fails); the
config is parsed as kind v0.32.0 parses it (kind_parse_config: v1alpha4 only, unknown fields
refused) and each node mount becomes the ``--volume`` spec kind hands to ``docker run``, parsed as
the daemon parses it. ``create cluster`` asks the host for the cluster (an API server, Ready nodes,
node containers labelled io.x-k8s.kind.cluster / io.x-k8s.kind.role, the ``kind`` network), then
merges its kubeconfig into --kubeconfig (else the first KUBECONFIG path, else ~/.kube/config);
``delete cluster`` removes the nodes and the kind-<name> entries from that file, which stays (kind
pkg/cluster/internal/kubeconfig/internal/kubeconfig/remove.go RemoveKIND, @ v0.32.0).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import yaml  # noqa: E402
from common import control, exit_with, read_stdin, record, write_private  # noqa: E402

from tests.substrate import tool_contracts as contracts  # noqa: E402


def kubeconfig_path(flags):
    if flags.get("--kubeconfig"):
        return flags["--kubeconfig"]
    env = os.environ.get("KUBECONFIG")
    if env:
        return env.split(os.pathsep)[0]
    return os.path.expanduser("~/.kube/config")


def merge(path, new):
    """kind's merge: entries named like the new ones are replaced, the others kept; current-context is the new one."""
    existing = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            existing = yaml.safe_load(handle) or {}
    for section in ("clusters", "users", "contexts"):
        entries = [e for e in existing.get(section) or [] if e.get("name") not in {n["name"] for n in new[section]}]
        existing[section] = entries + new[section]
    existing.update({"apiVersion": "v1", "kind": "Config", "current-context": new["current-context"]})
    existing.setdefault("preferences", {})
    write_private(path, yaml.safe_dump(existing, sort_keys=False))


def remove(path, name):
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    key, mutated = "kind-" + name, False
    for section in ("clusters", "users", "contexts"):
        kept = [e for e in config.get(section) or [] if e.get("name") != key]
        mutated = mutated or len(kept) != len(config.get(section) or [])
        config[section] = kept
    if config.get("current-context") == key:
        config["current-context"] = ""
        mutated = True
    if mutated:
        write_private(path, yaml.safe_dump(config, sort_keys=False))


def main(argv):
    stdin = read_stdin()
    record("kind", argv, stdin)
    try:
        command, flags = contracts.kind_args(argv)
    except contracts.Refused as exc:
        exit_with(str(exc), exc.rc)
    name = flags.get("--name", flags.get("-n", "kind"))
    if command == ("version",):
        print("kind v%s go1.24.4 linux/amd64" % contracts.KIND_VERSION)
    elif command == ("get", "clusters"):
        _status, clusters = control("GET", "/kind/clusters")
        if not clusters:
            sys.stderr.write("No kind clusters found.\n")
        for cluster in clusters:
            print(cluster)
    elif command == ("get", "nodes"):
        _status, nodes = control("GET", "/kind/nodes?name=" + name)
        if not nodes:
            sys.stderr.write('No kind nodes found for cluster "%s".\n' % name)
        for node in nodes:
            print(node)
    elif command == ("get", "kubeconfig"):
        status, body = control("GET", "/kind/kubeconfig?name=" + name)
        if status != 200:
            exit_with(body["error"])
        sys.stdout.write(yaml.safe_dump(body, sort_keys=False))
    elif command == ("create", "cluster"):
        source = flags.get("--config")
        if source == "-":
            text = stdin
        elif source:
            try:
                with open(source, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                exit_with(f"ERROR: failed to create cluster: error reading file: {exc}")
        else:
            text = ""
        try:
            config = (
                contracts.kind_parse_config(text)
                if text.strip()
                else {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4"}
            )
            for node_config, node_name in zip(config.get("nodes") or [{}], contracts.kind_node_names(name, config)):
                for spec in contracts.kind_mount_bindings(node_config.get("extraMounts")):
                    try:
                        contracts.docker_volume(spec)
                    except contracts.Refused as exc:
                        raise contracts.Refused(
                            'ERROR: failed to create cluster: command "docker run --name %s --volume %s ..." failed '
                            "with error: exit status 125\nCommand Output: %s" % (node_name, spec, exc)
                        )
        except contracts.Refused as exc:
            exit_with(str(exc), exc.rc)
        sys.stderr.write('Creating cluster "%s" ...\n' % name)
        status, body = control("POST", "/kind/create", {"name": name, "config": config, "image": flags.get("--image")})
        if status != 200:
            exit_with(body.get("error", "ERROR: failed to create cluster"))
        merge(kubeconfig_path(flags), body)
        sys.stderr.write('Set kubectl context to "kind-%s"\n' % name)
    elif command == ("delete", "cluster"):
        sys.stderr.write('Deleting cluster "%s" ...\n' % name)
        control("POST", "/kind/delete", {"name": name})
        remove(kubeconfig_path(flags), name)


if __name__ == "__main__":
    main(sys.argv[1:])
